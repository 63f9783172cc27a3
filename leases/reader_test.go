package leases

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestExampleFileRoundTrips(t *testing.T) {
	data, err := os.ReadFile("testdata/example.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(data), string(out)); diff != "" {
		t.Errorf("Encode(Decode(example)) differs (-file +encoded):\n%s", diff)
	}
	// Encoding sorts by IP whatever the order in memory.
	f.Leases[0], f.Leases[3] = f.Leases[3], f.Leases[0]
	again, _ := f.Encode()
	if !bytes.Equal(again, out) {
		t.Error("Encode does not sort leases by IP")
	}
}

func TestStoreOutputIsTheDocumentedFormat(t *testing.T) {
	s, _ := newStore(t, "10.244.3.0/24")
	req := cniReq("c1")
	req.MAC = "02:00:0a:f4:03:02"
	mustReserve(t, s, req)
	data, _ := os.ReadFile(s.Path())
	var generic map[string]any
	if err := json.Unmarshal(data, &generic); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"version": 1.0, "node": "node-a", "subnet": "10.244.3.0/24", "gateway": "10.244.3.1", "lastReserved": "10.244.3.2",
		"leases": []any{map[string]any{
			"mac": "02:00:0a:f4:03:02", "ip": "10.244.3.2", "state": "reserved", "source": "cni",
			"containerID": "c1", "ifname": "eth0",
			"pod":     map[string]any{"namespace": "default", "name": "pod-c1", "uid": "uid-c1"},
			"created": "2026-11-22T17:00:00Z",
		}},
	}
	if diff := cmp.Diff(want, generic); diff != "" {
		t.Errorf("file content (-want +got):\n%s", diff)
	}
}

func TestDecodeErrorsNameTheProblem(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`[]`, "not a lease file"},
		{`{"leases":[]}`, `no "version"`},
		{`{"version":7}`, "unsupported lease file version 7"},
		{`{"version":1,"subnet":"10.0.0.5/24","leases":[]}`, "host bits"},
		{`{"version":1,"subnet":"10.0.0.0/24","gateway":"10.9.0.1","leases":[]}`, "gateway 10.9.0.1 is outside"},
		{`{"version":1,"subnet":"10.0.0.0/24","leases":[{"ip":"10.1.0.2","state":"bound","source":"cni"}]}`, "outside subnet"},
		{`{"version":1,"subnet":"10.0.0.0/24","leases":[{"ip":"10.0.0.2","mac":"02:AA:00:00:00:01","state":"bound","source":"cni"}]}`, "not lowercase"},
		{`{"version":1,"subnet":"10.0.0.0/24","leases":[{"ip":"10.0.0.2","source":"cni"}]}`, `lease 0 has no "state"`},
		{`{"version":1,"subnet":"10.0.0.0/24","leases":[{"ip":"10.0.0.2","state":"bound","source":""}]}`, `lease 0 has no "source"`},
		{`{"version":1,"subnet":"10.0.0.0/24","leases":[{"state":"bound","source":"cni"}]}`, `no valid "ip"`},
	} {
		_, err := Decode([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%s) = %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestSnapshotLookups(t *testing.T) {
	s, err := Read("testdata/example.json")
	if err != nil {
		t.Fatal(err)
	}
	s.now = time.Date(2026, 11, 22, 17, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		mac, want string
	}{
		{"02:00:0a:f4:03:07", "10.244.3.7"},
		{"02-00-0A-F4-03-07", "10.244.3.7"}, // any spelling net.ParseMAC takes
		{"52:54:00:12:34:56", "10.244.3.200"},
		{"52:54:00:ab:cd:ef", ""}, // declined: not its address
		{"02:00:00:00:00:00", ""},
		{"junk", ""},
	} {
		l, ok := s.ByMAC(tc.mac)
		if got := map[bool]string{true: l.IP.String(), false: ""}[ok]; got != tc.want {
			t.Errorf("ByMAC(%s) = %q, want %q", tc.mac, got, tc.want)
		}
	}
	s.now = time.Date(2026, 11, 22, 18, 30, 0, 0, time.UTC)
	if _, ok := s.ByMAC("52:54:00:12:34:56"); ok {
		t.Error("ByMAC returned an expired lease")
	}
	if l, ok := s.ByIP(netip.MustParseAddr("10.244.3.201")); !ok || l.State != StateDeclined {
		t.Errorf("ByIP(declined) = %+v %v", l, ok)
	}
	if got := s.ByPod("vms", "vm-b"); len(got) != 1 || got[0].IP.String() != "10.244.3.7" {
		t.Errorf("ByPod(vms/vm-b) = %+v", got)
	}
}

// parseBootpdFile is ParseBootpd of the file at path; it fails t on error.
func parseBootpdFile(t *testing.T, path string) []Lease {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ls, err := ParseBootpd(f)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

func TestParseBootpd(t *testing.T) {
	got := parseBootpdFile(t, "testdata/dhcpd_leases")
	want := []Lease{
		{MAC: "02:00:0a:f4:03:07", IP: netip.MustParseAddr("192.168.64.3"), State: StateBound, Source: SourceDHCP, Hostname: "vm-new", Expires: time.Unix(0x6a3a2f40, 0).UTC()},
		{IP: netip.MustParseAddr("192.168.64.4"), State: StateBound, Source: SourceDHCP, Expires: time.Unix(0x6a3a2f40, 0).UTC()},
		{MAC: "62:25:1b:05:97:bf", IP: netip.MustParseAddr("192.168.64.2"), State: StateBound, Source: SourceDHCP, Hostname: "vm-old", Expires: time.Unix(0x6782bf9a, 0).UTC()},
	}
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Errorf("ParseBootpd (-want +got):\n%s", diff)
	}
}

func TestReadDetectsBootpd(t *testing.T) {
	s, err := Read("testdata/dhcpd_leases")
	if err != nil {
		t.Fatal(err)
	}
	s.now = time.Unix(0x6a3a2f40-60, 0)
	if l, ok := s.ByMAC("2:0:a:f4:3:7"); !ok || l.IP.String() != "192.168.64.3" {
		t.Errorf("ByMAC on bootpd file = %+v %v", l, ok)
	}
	if _, ok := s.ByMAC("62:25:1b:05:97:bf"); ok {
		t.Error("ByMAC returned an expired bootpd lease")
	}
}

func TestParseBootpdErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"{\n\tip_address=1.2.3.4\n", "not closed"},
		{"}\n", "without"},
		{"name=x\n", "outside an entry"},
		{"{\n{\n", "inside the entry"},
		{"{\n\tname=x\n}\n", "no ip_address"},
		{"{\n\tip_address=fe80::1\n}\n", "not an IPv4"},
		{"{\n\tip_address=1.2.3.4\n\tlease=12\n}\n", "hex Unix seconds"},
		{"{\n\tip_address=1.2.3.4\n\thw_address=1,1:2:3\n}\n", "6 octets"},
		{"{\n\tip_address=1.2.3.4\n\thw_address=1,1:2:3:4:5:xyz\n}\n", "not hex"},
		{"{\n\tip_address=1.2.3.4\n\tgarbage\n}\n", "not key=value"},
		{"{\n\tname=" + strings.Repeat("x", maxBootpdLine) + "\n}\n", "longer than"},
	} {
		_, err := ParseBootpd(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseBootpd(%q) = %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestCompat(t *testing.T) {
	s, err := Read("testdata/example.json")
	if err != nil {
		t.Fatal(err)
	}
	s.now = time.Date(2026, 11, 22, 17, 30, 0, 0, time.UTC)
	data, err := json.Marshal(s.Compat())
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]string
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{
		{"mac": "02:00:0a:f4:03:02", "ip": "10.244.3.2", "expiry": "9999-12-31T23:59:59Z"},
		{"mac": "02:00:0a:f4:03:07", "ip": "10.244.3.7", "expiry": "2026-11-23T17:01:05Z"},
		{"mac": "52:54:00:12:34:56", "ip": "10.244.3.200", "expiry": "2026-11-22T18:02:00Z"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("compat export (-want +got):\n%s", diff)
	}
}

func TestWaitWakesOnBind(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	s.now = time.Now // Wait compares expiry with the real clock
	req := cniReq("vm")
	req.MAC = "02:00:00:00:00:01"
	l := mustReserve(t, s, req)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	var got Lease
	go func() {
		var err error
		got, err = Wait(ctx, s.Path(), "02:00:00:00:00:01")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Wait returned before the lease was bound: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := s.Bind(req.MAC, l.IP, time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || got.IP != l.IP {
		t.Fatalf("Wait = %v, %v; want %s", got.IP, err, l.IP)
	}
}

// TestWaitPollsWithoutAWatch: where no watch can be had (inotify's
// instance limit reached: EMFILE), Wait polls instead of failing.
func TestWaitPollsWithoutAWatch(t *testing.T) {
	watch = func(string) (<-chan struct{}, func(), error) {
		return nil, nil, os.NewSyscallError("inotify_init1", syscall.EMFILE)
	}
	t.Cleanup(func() { watch = watchFile })
	TestWaitWakesOnBind(t)
}

func TestWaitHonoursContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.json") // never created
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Wait(ctx, path, "02:00:00:00:00:01")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want DeadlineExceeded", err)
	}
	if _, err := Wait(ctx, path, "bogus"); err == nil || !strings.Contains(err.Error(), "invalid MAC") {
		t.Fatalf("Wait(bogus MAC) = %v", err)
	}
}

// TestParseBootpdLogsRecordsWithoutMAC: each record left without a MAC
// gets one debug line naming it and its hw_address; the others none.
func TestParseBootpdLogsRecordsWithoutMAC(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(old) })
	parseBootpdFile(t, "testdata/dhcpd_leases-macos15")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	for _, name := range []string{"systemd-duid-en", "duid-ll-not-ethernet", "duid-ll-short", "not-hex"} {
		if n := strings.Count(buf.String(), "name="+name+" "); n != 1 {
			t.Errorf("%d debug lines for %s, want 1:\n%s", n, name, buf.String())
		}
	}
	if len(lines) != 4 || !strings.Contains(lines[0], "level=DEBUG") || !strings.Contains(lines[0], "hw_address=ff,") {
		t.Errorf("debug lines:\n%s", buf.String())
	}
}

// TestParseBootpdClientIDs: records in the shapes macOS 15's bootpd writes
// for guests that send an RFC 4361 client identifier (vfkit#242,
// lima#3123): the MAC of a DUID-LL or DUID-LLT of an Ethernet link is
// taken out; systemd's DUID-EN, another link type, a truncated DUID or one
// that does not parse give no MAC, and never a wrong one.
func TestParseBootpdClientIDs(t *testing.T) {
	got := parseBootpdFile(t, "testdata/dhcpd_leases-macos15")
	want := map[string]string{
		"duid-ll": "52:55:55:ba:82:85", "duid-llt": "08:00:27:0f:0e:0d", "systemd-duid-en": "",
		"duid-ll-not-ethernet": "", "duid-ll-short": "", "not-hex": "", "mac-identifier": "52:55:55:ba:82:86",
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for _, l := range got {
		if w, ok := want[l.Hostname]; !ok || l.MAC != w {
			t.Errorf("%s: MAC %q, want %q", l.Hostname, l.MAC, w)
		}
	}
	s, err := Read("testdata/dhcpd_leases-macos15")
	if err != nil {
		t.Fatal(err)
	}
	s.now = time.Unix(0x6a3a2f40-60, 0)
	for _, l := range got {
		if l.MAC == "" {
			if m, ok := s.ByMAC(""); ok {
				t.Errorf("ByMAC(\"\") found %+v", m)
			}
			if b, ok := s.ByIP(l.IP); !ok || b.Hostname != l.Hostname {
				t.Errorf("ByIP(%s) of %s = %+v, %v", l.IP, l.Hostname, b, ok)
			}
		}
	}
	if l, ok := s.ByMAC("52:55:55:BA:82:85"); !ok || l.IP.String() != "192.168.64.10" {
		t.Errorf("ByMAC of a DUID-LL guest = %+v %v", l, ok)
	}
}
