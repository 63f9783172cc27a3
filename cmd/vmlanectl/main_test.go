package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vmlane/vmlane/internal/version"
	"github.com/vmlane/vmlane/leases"
)

var (
	// testNow is the clock the golden tables are judged by: after the
	// fixture's expired lease, before the others and before bootpd's
	// vm-new lease.
	testNow    = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	farFuture  = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	longPast   = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	testSubnet = netip.MustParsePrefix("10.244.3.0/24")
	testGW     = netip.MustParseAddr("10.244.3.1")
)

// Fixture MACs.
const (
	macBound    = "02:00:0a:f4:03:02" // CNI, bound until 2099
	macReserved = "02:00:0a:f4:03:07" // CNI, reserved, never bound
	macExpired  = "52:54:00:12:34:56" // DHCP, bound until 2025
	macDeclined = "52:54:00:ab:cd:ef" // declined until 2099
)

// openStore opens a store at path whose clock stands still at testNow, so
// the "created" times are stable.
func openStore(t *testing.T, path string) *leases.Store {
	t.Helper()
	s, err := leases.Open(path, testSubnet, testGW, leases.WithNode("node-a"), leases.WithClock(func() time.Time { return testNow }))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// writeFixture builds a lease file with one lease in each interesting
// condition and returns its path and store.
func writeFixture(t *testing.T) (string, *leases.Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leases.json")
	s := openStore(t, path)
	must := func(_ leases.Lease, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Reserve(leases.ReserveRequest{
		Key:   leases.Key{ContainerID: "4f6c2b9e0d1a77aa88bb99cc", IfName: "eth0"},
		IP:    netip.MustParseAddr("10.244.3.2"),
		MAC:   macBound,
		NetNS: "/var/run/netns/cni-0a1b",
		Pod:   leases.Pod{Namespace: "default", Name: "vm-a", UID: "uid-a"},
	}))
	must(s.Bind(macBound, netip.MustParseAddr("10.244.3.2"), farFuture, "vm-a"))
	must(s.Reserve(leases.ReserveRequest{
		Key: leases.Key{ContainerID: "9a8b7c6d5e4f", IfName: "net1"},
		IP:  netip.MustParseAddr("10.244.3.7"),
		MAC: macReserved,
		Pod: leases.Pod{Namespace: "vms", Name: "vm-b", UID: "uid-b"},
	}))
	must(s.Reserve(leases.ReserveRequest{
		MAC:     macExpired,
		IP:      netip.MustParseAddr("10.244.3.200"),
		Expires: longPast,
	}))
	must(s.Bind(macExpired, netip.MustParseAddr("10.244.3.200"), longPast, "old-vm"))
	must(s.Decline(netip.MustParseAddr("10.244.3.201"), macDeclined, farFuture))
	return path, s
}

type result struct {
	code           int
	stdout, stderr string
}

// runAt runs the CLI with its clock at testNow.
func runAt(args ...string) result {
	var out, errb bytes.Buffer
	c := &cli{stdout: &out, stderr: &errb, now: func() time.Time { return testNow }}
	code := c.run(args)
	return result{code, out.String(), errb.String()}
}

const fixtureTable = `IP            MAC                STATE     SOURCE  POD           CONTAINER     IFNAME  HOSTNAME  EXPIRES
10.244.3.2    02:00:0a:f4:03:02  bound     cni     default/vm-a  4f6c2b9e0d1a  eth0    vm-a      2099-01-01T00:00:00Z
10.244.3.7    02:00:0a:f4:03:07  reserved  cni     vms/vm-b      9a8b7c6d5e4f  net1    -         -
10.244.3.200  52:54:00:12:34:56  bound     dhcp    -             -             -       old-vm    2025-06-01T00:00:00Z (expired)
10.244.3.201  52:54:00:ab:cd:ef  declined  dhcp    -             -             -       -         2099-01-01T00:00:00Z
`

const boundJSON = `{
  "mac": "02:00:0a:f4:03:02",
  "ip": "10.244.3.2",
  "state": "bound",
  "source": "cni",
  "containerID": "4f6c2b9e0d1a77aa88bb99cc",
  "ifname": "eth0",
  "netns": "/var/run/netns/cni-0a1b",
  "pod": {
    "namespace": "default",
    "name": "vm-a",
    "uid": "uid-a"
  },
  "hostname": "vm-a",
  "created": "2026-01-02T03:04:05Z",
  "expires": "2099-01-01T00:00:00Z"
}
`

// The one-row tables of get, whose columns are as wide as that row needs.
const (
	boundRow = `IP          MAC                STATE  SOURCE  POD           CONTAINER     IFNAME  HOSTNAME  EXPIRES
10.244.3.2  02:00:0a:f4:03:02  bound  cni     default/vm-a  4f6c2b9e0d1a  eth0    vm-a      2099-01-01T00:00:00Z
`
	reservedRow = `IP          MAC                STATE     SOURCE  POD       CONTAINER     IFNAME  HOSTNAME  EXPIRES
10.244.3.7  02:00:0a:f4:03:07  reserved  cni     vms/vm-b  9a8b7c6d5e4f  net1    -         -
`
	expiredRow = `IP            MAC                STATE  SOURCE  POD  CONTAINER  IFNAME  HOSTNAME  EXPIRES
10.244.3.200  52:54:00:12:34:56  bound  dhcp    -    -          -       old-vm    2025-06-01T00:00:00Z (expired)
`
	declinedRow = `IP            MAC                STATE     SOURCE  POD  CONTAINER  IFNAME  HOSTNAME  EXPIRES
10.244.3.201  52:54:00:ab:cd:ef  declined  dhcp    -    -          -       -         2099-01-01T00:00:00Z
`
)

func TestOutput(t *testing.T) {
	path, _ := writeFixture(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"list", []string{"leases", "list", "--lease-file", path}, fixtureTable},
		{"list flags first", []string{"leases", "--lease-file", path, "-o", "table", "list"}, fixtureTable},
		{"get by MAC", []string{"leases", "get", "--mac", macBound, "--lease-file", path}, boundRow},
		{"get by MAC other spelling", []string{"leases", "get", "--mac", "02-00-0A-F4-03-02", "--lease-file", path}, boundRow},
		{"get by MAC json", []string{"leases", "get", "--lease-file", path, "--mac", macBound, "-o", "json"}, boundJSON},
		{"get by MAC json flags first", []string{"leases", "-o", "json", "--mac", macBound, "--lease-file=" + path, "get"}, boundJSON},
		{"get reserved by MAC", []string{"leases", "get", "--mac", macReserved, "--lease-file", path}, reservedRow},
		{"get expired by IP", []string{"leases", "get", "--ip", "10.244.3.200", "--lease-file", path}, expiredRow},
		{"get declined by mapped IP", []string{"leases", "get", "--ip", "::ffff:10.244.3.201", "--lease-file", path}, declinedRow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runAt(tt.args...)
			if r.code != exitOK || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			if diff := cmp.Diff(tt.want, r.stdout); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
		})
	}
}

func TestListJSON(t *testing.T) {
	path, s := writeFixture(t)
	r := runAt("leases", "list", "-o", "json", "--lease-file", path)
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	var got []leases.Lease
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("stdout is not a lease array: %v\n%s", err, r.stdout)
	}
	want, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("leases (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(r.stdout, "[\n  {\n    \"mac\": ") {
		t.Errorf("stdout is not indented by 2:\n%s", r.stdout)
	}
}

func TestListEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.json")
	s := openStore(t, path)
	// Reserve and release, so the file exists and holds no lease.
	key := leases.Key{ContainerID: "c", IfName: "eth0"}
	if _, err := s.Reserve(leases.ReserveRequest{Key: key}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Release(key); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want result
	}{
		{[]string{"leases", "list", "--lease-file", path}, result{exitOK, "", "no leases in " + path + "\n"}},
		{[]string{"leases", "list", "--lease-file", path, "-o", "json"}, result{exitOK, "[]\n", ""}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, runAt(tt.args...), cmp.AllowUnexported(result{})); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tt.args, diff)
		}
	}
}

func TestListBootpd(t *testing.T) {
	const want = `IP            MAC                STATE  SOURCE  POD  CONTAINER  IFNAME  HOSTNAME  EXPIRES
192.168.64.2  62:25:1b:05:97:bf  bound  dhcp    -    -          -       vm-old    2025-01-11T18:59:38Z (expired)
192.168.64.3  02:00:0a:f4:03:07  bound  dhcp    -    -          -       vm-new    2026-06-23T07:01:20Z
192.168.64.4  -                  bound  dhcp    -    -          -       -         2026-06-23T07:01:20Z
`
	r := runAt("leases", "list", "--lease-file", filepath.Join("..", "..", "leases", "testdata", "dhcpd_leases"))
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if diff := cmp.Diff(want, r.stdout); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
}

func TestExport(t *testing.T) {
	path, _ := writeFixture(t)
	out := filepath.Join(t.TempDir(), "cocoon.json")
	r := runAt("leases", "export", "--lease-file", path, "--cocoon", out)
	if r.code != exitOK || r.stdout != "" || r.stderr != "" {
		t.Fatalf("got %+v, want exit 0 and no output", r)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Expired and declined leases are not live; a reservation held until
	// released gets the compat format's "forever".
	const want = `[
  {
    "mac": "02:00:0a:f4:03:02",
    "ip": "10.244.3.2",
    "expiry": "2099-01-01T00:00:00Z"
  },
  {
    "mac": "02:00:0a:f4:03:07",
    "ip": "10.244.3.7",
    "expiry": "9999-12-31T23:59:59Z"
  }
]
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("export (-want +got):\n%s", diff)
	}
}

func TestErrors(t *testing.T) {
	path, _ := writeFixture(t)
	missing := filepath.Join(t.TempDir(), "nope.json")
	corrupt := filepath.Join(t.TempDir(), "corrupt.json")
	if err := os.WriteFile(corrupt, []byte(`{"version":1,"subnet":"10.0.0.0/24","leases":[{"ip":"10.9.9.9"`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		// stderr must hold each of these.
		want []string
	}{
		{"no args", nil, exitUsage, []string{"Usage:"}},
		{"unknown command", []string{"lease"}, exitUsage, []string{`unknown command "lease"`}},
		{"unknown leases command", []string{"leases", "show"}, exitUsage, []string{`unknown command "show"`}},
		{"no leases command", []string{"leases", "-o", "json"}, exitUsage, []string{"missing command"}},
		{"help on unknown topic", []string{"help", "routes"}, exitUsage, []string{`"routes"`}},
		{"extra argument", []string{"leases", "list", "extra", "--lease-file", path}, exitUsage, []string{`unexpected argument "extra"`}},
		{"undefined flag", []string{"leases", "list", "--node", "a"}, exitUsage, []string{"-node"}},
		{"flag of another command", []string{"leases", "list", "--mac", macBound}, exitUsage, []string{"--mac does not apply to list"}},
		{"bad MAC", []string{"leases", "get", "--mac", "02:00:zz", "--lease-file", path}, exitUsage, []string{"-mac", `"02:00:zz"`}},
		{"bad IP", []string{"leases", "get", "--ip", "10.244.3", "--lease-file", path}, exitUsage, []string{"-ip", `"10.244.3"`}},
		{"bad output", []string{"leases", "list", "-o", "yaml", "--lease-file", path}, exitUsage, []string{"-o", `"yaml"`, "table or json"}},
		{"bad duration", []string{"leases", "wait", "--mac", macBound, "--timeout", "soon"}, exitUsage, []string{"-timeout", `"soon"`}},
		{"negative duration", []string{"leases", "wait", "--mac", macBound, "--timeout", "-1s"}, exitUsage, []string{"--timeout", `"-1s"`}},
		{"empty lease file flag", []string{"leases", "list", "--lease-file="}, exitUsage, []string{"--lease-file"}},
		{"get without MAC or IP", []string{"leases", "get", "--lease-file", path}, exitUsage, []string{"missing --mac or --ip"}},
		{"get with MAC and IP", []string{"leases", "get", "--mac", macBound, "--ip", "10.244.3.2", "--lease-file", path}, exitUsage, []string{"--mac and --ip"}},
		{"wait without MAC", []string{"leases", "wait", "--lease-file", path}, exitUsage, []string{"missing --mac"}},
		{"export without cocoon", []string{"leases", "export", "--lease-file", path}, exitUsage, []string{"missing --cocoon"}},
		{"missing file", []string{"leases", "list", "--lease-file", missing}, exitFail, []string{"lease file " + missing + " does not exist"}},
		{"missing file get", []string{"leases", "get", "--mac", macBound, "--lease-file", missing}, exitFail, []string{missing}},
		{"corrupt file", []string{"leases", "list", "--lease-file", corrupt}, exitFail, []string{"lease file " + corrupt}},
		{"no lease for MAC", []string{"leases", "get", "--mac", "02:00:00:00:00:99", "--lease-file", path}, exitFail, []string{"no lease for MAC 02:00:00:00:00:99 in " + path + "\n"}},
		{"expired MAC", []string{"leases", "get", "--mac", macExpired, "--lease-file", path}, exitFail, []string{"no lease for MAC " + macExpired, "10.244.3.200 expired at 2025-06-01T00:00:00Z"}},
		{"declined MAC", []string{"leases", "get", "--mac", macDeclined, "--lease-file", path}, exitFail, []string{"no lease for MAC " + macDeclined, "declined"}},
		{"no lease for IP", []string{"leases", "get", "--ip", "10.244.3.9", "--lease-file", path}, exitFail, []string{"no lease for IP 10.244.3.9"}},
		{"export to a missing folder", []string{"leases", "export", "--lease-file", path, "--cocoon", filepath.Join(missing, "x.json")}, exitFail, []string{"cocoon-net export", missing}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, &out, &errb)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, errb.String())
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr does not hold %q:\n%s", w, errb.String())
				}
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"help"},
		{"--help"},
		{"-h"},
		{"help", "leases"},
		{"leases", "help"},
		{"leases", "--help"},
		{"leases", "list", "-h"},
		{"leases", "wait", "--mac", macBound, "-help"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != exitOK {
			t.Errorf("%q: exit %d, want 0", args, code)
		}
		if diff := cmp.Diff(usage(), errb.String()); diff != "" || out.Len() != 0 {
			t.Errorf("%q: stdout %q; stderr (-want +got):\n%s", args, out.String(), diff)
		}
	}
}

func TestVersion(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v0.4.0"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != exitOK {
			t.Errorf("%q: exit %d, want 0", args, code)
		}
		if got, want := out.String(), version.String("vmlanectl")+"\n"; got != want || errb.Len() != 0 {
			t.Errorf("%q: stdout %q, stderr %q; want stdout %q", args, got, errb.String(), want)
		}
		if !strings.Contains(out.String(), "vmlanectl v0.4.0 (") {
			t.Errorf("%q: %q does not name the release", args, out.String())
		}
	}
}

func TestWaitTimeout(t *testing.T) {
	path, _ := writeFixture(t)
	start := time.Now()
	var out, errb bytes.Buffer
	code := run([]string{"leases", "wait", "--mac", macReserved, "--timeout", "100ms", "--lease-file", path}, &out, &errb)
	if code != exitFail {
		t.Errorf("exit %d, want %d", code, exitFail)
	}
	const want = "vmlanectl leases wait: timed out after 100ms waiting for a bound lease of MAC 02:00:0a:f4:03:07: its lease for 10.244.3.7 in "
	if !strings.HasPrefix(errb.String(), want) || !strings.HasSuffix(errb.String(), " is reserved\n") {
		t.Errorf("stderr %q, want %q...%q", errb.String(), want, " is reserved\n")
	}
	if out.Len() != 0 {
		t.Errorf("stdout %q, want nothing", out.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("wait took %s with a 100ms timeout", d)
	}
}

func TestWaitBound(t *testing.T) {
	// bind binds macReserved's lease in the store at path, after a pause
	// that lets wait start watching first.
	bind := func(t *testing.T, path string, s *leases.Store, done chan<- struct{}) {
		defer close(done)
		time.Sleep(50 * time.Millisecond)
		if s == nil {
			// Not openStore: t.Fatal must not run off the test's goroutine.
			var err error
			s, err = leases.Open(path, testSubnet, testGW) // creates the folder
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := s.Reserve(leases.ReserveRequest{
				Key: leases.Key{ContainerID: "9a8b7c6d5e4f", IfName: "net1"},
				IP:  netip.MustParseAddr("10.244.3.7"),
				MAC: macReserved,
			}); err != nil {
				t.Error(err)
				return
			}
		}
		if _, err := s.Bind(macReserved, netip.MustParseAddr("10.244.3.7"), farFuture, "vm-b"); err != nil {
			t.Error(err)
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T) (string, *leases.Store)
	}{
		{"file exists", writeFixture},
		{"file appears", func(t *testing.T) (string, *leases.Store) {
			return filepath.Join(t.TempDir(), "leases.json"), nil
		}},
		{"folder appears", func(t *testing.T) (string, *leases.Store) {
			return filepath.Join(t.TempDir(), "vmlane", "leases.json"), nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, s := tt.setup(t)
			done := make(chan struct{})
			go bind(t, path, s, done)
			var out, errb bytes.Buffer
			code := run([]string{"leases", "wait", "-o", "json", "--mac", "2:0:a:f4:3:7", "--timeout", "10s", "--lease-file", path}, &out, &errb)
			<-done
			if code != exitOK {
				t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
			}
			var got leases.Lease
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("stdout is not a lease: %v\n%s", err, out.String())
			}
			want := leases.Lease{MAC: macReserved, IP: netip.MustParseAddr("10.244.3.7"), State: leases.StateBound, Hostname: "vm-b", Expires: farFuture}
			if diff := compactDiff(want, got); diff != "" {
				t.Errorf("lease (-want +got):\n%s", diff)
			}
		})
	}
}

// compactDiff compares the fields wait promises, ignoring the ones the
// fixture and the late reservation fill differently.
func compactDiff(want, got leases.Lease) string {
	got.Source, got.ContainerID, got.IfName, got.Pod, got.Created = "", "", "", leases.Pod{}, time.Time{}
	return cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }))
}

// TestNewerVmlanesLeases: a file in which a newer vmlane wrote a state and
// a source this version does not know is listed whole, with the values it
// holds; get by IP shows such a lease, and get by its MAC says why it is no
// live lease rather than that the file has none.
func TestNewerVmlanesLeases(t *testing.T) {
	path := filepath.Join("..", "..", "leases", "testdata", "newer-binary.json")
	const table = `IP          MAC                STATE        SOURCE    POD       CONTAINER  IFNAME  HOSTNAME  EXPIRES
10.244.3.2  02:00:0a:f4:03:02  bound        cni       vms/vm-a  c-a        eth0    vm-a      2026-11-23T16:00:00Z
10.244.3.3  02:00:0a:f4:03:03  quarantined  cni       vms/vm-q  c-q        eth0    -         2026-11-22T16:45:00Z
10.244.3.4  52:54:00:00:00:04  bound        kubevirt  -         c-k        eth1    vmi-k     2026-11-22T16:50:00Z
`
	r := runAt("leases", "list", "--lease-file", path)
	if r.code != exitOK {
		t.Fatalf("list: exit %d, stderr %q", r.code, r.stderr)
	}
	if diff := cmp.Diff(table, r.stdout); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	r = runAt("leases", "list", "-o", "json", "--lease-file", path)
	for _, want := range []string{`"state": "quarantined"`, `"source": "kubevirt"`} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Errorf("list -o json: exit %d, stdout lacks %s:\n%s", r.code, want, r.stdout)
		}
	}
	r = runAt("leases", "get", "--ip", "10.244.3.3", "--lease-file", path)
	if r.code != exitOK || !strings.Contains(r.stdout, "quarantined") {
		t.Errorf("get --ip: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runAt("leases", "get", "--mac", "52:54:00:00:00:04", "--lease-file", path)
	if want := `its lease for 10.244.3.4 has state "bound" and source "kubevirt", which this vmlanectl does not know`; r.code != exitFail || !strings.Contains(r.stderr, want) {
		t.Errorf("get --mac: exit %d, stderr %q, want it to hold %q", r.code, r.stderr, want)
	}
}

// TestListDualStack: a dual-stack node's table has the IPv6 address and
// DHCPv6 state beside each lease's, and get finds a lease by its ip6.
func TestListDualStack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.json")
	s, err := leases.Open(path, netip.MustParsePrefix("10.244.3.0/24"), netip.MustParseAddr("10.244.3.1"),
		leases.WithSubnet6(netip.MustParsePrefix("fd00:10:244:3::/64"), netip.MustParseAddr("fd00:10:244:3::1")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(leases.ReserveRequest{Key: leases.Key{ContainerID: "4f6c2b9e0d1a77aa", IfName: "eth0"}, MAC: "02:00:0a:f4:03:02",
		Pod: leases.Pod{Namespace: "default", Name: "vm-a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bind6("02:00:0a:f4:03:02", netip.MustParseAddr("fd00:10:244:3::2"), farFuture); err != nil {
		t.Fatal(err)
	}
	const want = `IP          IP6               MAC                STATE     STATE6  SOURCE  POD           CONTAINER     IFNAME  HOSTNAME  EXPIRES
10.244.3.2  fd00:10:244:3::2  02:00:0a:f4:03:02  reserved  bound   cni     default/vm-a  4f6c2b9e0d1a  eth0    -         -
`
	for _, args := range [][]string{
		{"leases", "list", "--lease-file", path},
		{"leases", "get", "--ip", "fd00:10:244:3::2", "--lease-file", path},
	} {
		r := runAt(args...)
		if r.code != exitOK || r.stderr != "" {
			t.Fatalf("%q: exit %d, stderr %q", args, r.code, r.stderr)
		}
		if diff := cmp.Diff(want, r.stdout); diff != "" {
			t.Errorf("%q: stdout (-want +got):\n%s", args, diff)
		}
	}
}
