package plugin

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmlane/vmlane/leases"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// specVersions are the CNI spec versions vmlane speaks, oldest first.
var specVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

func TestDeriveMAC(t *testing.T) {
	for _, tc := range []struct{ ip, want string }{
		{"10.244.3.7", "02:76:0a:f4:03:07"},
		{"10.244.3.1", "02:76:0a:f4:03:01"},
		{"0.0.0.0", "02:76:00:00:00:00"},
		{"255.255.255.255", "02:76:ff:ff:ff:ff"},
		{"192.168.100.254", "02:76:c0:a8:64:fe"},
	} {
		if got := DeriveMAC(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("DeriveMAC(%s) = %s, want %s", tc.ip, got, tc.want)
		}
	}
}

// TestDeriveMACIsLocalUnicast: every derived MAC has the IEEE 802
// locally-administered bit set and the group bit clear, is in the lease
// file's canonical form, and no two addresses share one.
func TestDeriveMACIsLocalUnicast(t *testing.T) {
	seen := make(map[string]netip.Addr)
	check := func(ip netip.Addr) {
		m := DeriveMAC(ip)
		hw, err := net.ParseMAC(m)
		if err != nil {
			t.Fatalf("DeriveMAC(%s) = %q: %v", ip, m, err)
		}
		if hw[0]&0x01 != 0 {
			t.Errorf("DeriveMAC(%s) = %s is a multicast address", ip, m)
		}
		if hw[0]&0x02 == 0 {
			t.Errorf("DeriveMAC(%s) = %s is not locally administered", ip, m)
		}
		if n, err := leases.NormalizeMAC(m); err != nil || n != m {
			t.Errorf("DeriveMAC(%s) = %q, not canonical (%q, %v)", ip, m, n, err)
		}
		if prev, ok := seen[m]; ok && prev != ip {
			t.Errorf("DeriveMAC gives %s to both %s and %s", m, prev, ip)
		}
		seen[m] = ip
	}
	// A whole /16, and addresses spread over the IPv4 space.
	for a := netip.MustParseAddr("10.244.0.0"); a.As4()[1] == 244; a = a.Next() {
		check(a)
	}
	for i := range uint32(4096) {
		v := i * 1048573 // a prime stride across 2^32
		check(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}))
	}
}

func TestHostVethName(t *testing.T) {
	// The name is a contract with every host that ran an earlier vmlane:
	// DEL and GC find the veth by recomputing it, so changing the scheme
	// leaks the veths of running pods on upgrade.
	k := leases.Key{ContainerID: "0123456789abcdef", IfName: "eth0"}
	if got, want := HostVethName(k), "vml95d930c5a66"; got != want {
		t.Errorf("HostVethName(%v) = %q, want %q (the scheme changed: running pods' veths would leak)", k, got, want)
	}
	if HostVethName(k) != HostVethName(leases.Key{ContainerID: "0123456789abcdef", IfName: "eth0"}) {
		t.Error("HostVethName is not stable")
	}

	seen := make(map[string]leases.Key)
	check := func(k leases.Key) {
		n := HostVethName(k)
		if len(n) > 15 {
			t.Errorf("HostVethName(%v) = %q is %d bytes, more than the kernel's 15", k, n, len(n))
		}
		if !strings.HasPrefix(n, "vml") {
			t.Errorf("HostVethName(%v) = %q does not start with vml", k, n)
		}
		if strings.ContainsAny(n, "/: \t\n") {
			t.Errorf("HostVethName(%v) = %q is not a valid interface name", k, n)
		}
		if prev, ok := seen[n]; ok && prev != k {
			t.Errorf("HostVethName gives %q to both %v and %v", n, prev, k)
		}
		seen[n] = k
	}
	long := strings.Repeat("f", 64) // a containerd container ID is 64 hex digits
	for i := range 2000 {
		check(leases.Key{ContainerID: fmt.Sprintf("%s%04d", long[:60], i), IfName: "eth0"})
		check(leases.Key{ContainerID: fmt.Sprintf("%s%04d", long[:60], i), IfName: "net1"})
	}
	// The separator keeps the two fields apart.
	check(leases.Key{ContainerID: "ab", IfName: "c"})
	check(leases.Key{ContainerID: "a", IfName: "bc"})
	check(leases.Key{ContainerID: "", IfName: ""})
}

// resultConfig is the config the result tests render with.
func resultConfig(t *testing.T, vm bool) *Config {
	t.Helper()
	c, err := ParseConfig(netconf(t, map[string]any{
		"vm":  vm,
		"mtu": 1450,
		"dns": map[string]any{
			"nameservers": []string{"10.96.0.10"},
			"search":      []string{"default.svc.cluster.local", "svc.cluster.local"},
			"domain":      "cluster.local",
		},
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// resultAttached is what ADD would have built for 10.244.3.7.
func resultAttached(vm bool) Attached {
	const netns = "/var/run/netns/cni-1234"
	a := Attached{
		Bridge:   Link{Name: "vmlane0", MAC: GatewayMAC, MTU: 1450},
		HostVeth: Link{Name: "vml95d930c5a66", MAC: "ee:d1:4c:52:9b:10", MTU: 1450},
		PodVeth:  Link{Name: "eth0", MAC: "02:76:0a:f4:03:07", MTU: 1450, Sandbox: netns},
	}
	if vm {
		a.PodVeth.MAC = "ae:3f:22:10:8c:01" // the kernel's; the guest's MAC is the TAP entry's
		a.Tap = &Link{Name: "tap0", MAC: "02:76:0a:f4:03:07", MTU: 1450, Sandbox: netns}
	}
	return a
}

func modeName(vm bool) string {
	if vm {
		return "vm"
	}
	return "plain"
}

// TestResultGolden renders BuildResult as every spec version would print it
// (what types.PrintResult does: GetAsVersion, then JSON) and compares with
// testdata/result-<mode>-<version>.json. Run with -update to rewrite them.
func TestResultGolden(t *testing.T) {
	for _, vm := range []bool{false, true} {
		for _, v := range specVersions {
			name := fmt.Sprintf("result-%s-%s.json", modeName(vm), v)
			t.Run(name, func(t *testing.T) {
				r := BuildResult(resultConfig(t, vm), resultAttached(vm), netip.MustParseAddr("10.244.3.7"), netip.Addr{})
				conv, err := r.GetAsVersion(v)
				if err != nil {
					t.Fatalf("GetAsVersion(%s): %v", v, err)
				}
				raw, err := json.Marshal(conv)
				if err != nil {
					t.Fatal(err)
				}
				var pretty bytes.Buffer
				if err := json.Indent(&pretty, raw, "", "  "); err != nil {
					t.Fatal(err)
				}
				pretty.WriteByte('\n')
				path := filepath.Join("testdata", name)
				if *update {
					if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test -run TestResultGolden -update to create it)", err)
				}
				if diff := cmp.Diff(string(want), pretty.String()); diff != "" {
					t.Errorf("%s (-golden +got):\n%s", path, diff)
				}
			})
		}
	}
}

// TestResultVersions checks, per spec version, the parts of the rendered
// result that runtimes depend on, independently of the golden files.
func TestResultVersions(t *testing.T) {
	type iface struct {
		Name    string `json:"name"`
		Mac     string `json:"mac"`
		Mtu     *int   `json:"mtu"`
		Sandbox string `json:"sandbox"`
	}
	type ipc struct {
		Version   *string `json:"version"`
		Interface *int    `json:"interface"`
		Address   string  `json:"address"`
		Gateway   string  `json:"gateway"`
	}
	type route struct {
		Dst string `json:"dst"`
		GW  string `json:"gw"`
	}
	type result struct {
		CNIVersion string  `json:"cniVersion"`
		Interfaces []iface `json:"interfaces"`
		IPs        []ipc   `json:"ips"`
		Routes     []route `json:"routes"`
		DNS        DNS     `json:"dns"`
	}
	for _, vm := range []bool{false, true} {
		for _, v := range specVersions {
			t.Run(modeName(vm)+"-"+v, func(t *testing.T) {
				c := resultConfig(t, vm)
				r := BuildResult(c, resultAttached(vm), netip.MustParseAddr("10.244.3.7"), netip.Addr{})
				conv, err := r.GetAsVersion(v)
				if err != nil {
					t.Fatal(err)
				}
				raw, err := json.Marshal(conv)
				if err != nil {
					t.Fatal(err)
				}
				var got result
				if err := json.Unmarshal(raw, &got); err != nil {
					t.Fatal(err)
				}
				if got.CNIVersion != v {
					t.Errorf("cniVersion %q, want %q", got.CNIVersion, v)
				}
				wantIfs := []string{"vmlane0", "vml95d930c5a66", "eth0"}
				// The pod end of the veth, CNI_IFNAME, for VM pods too:
				// Kubernetes runtimes read the pod IP from there.
				carrier := 2
				if vm {
					wantIfs = append(wantIfs, "tap0")
				}
				var names []string
				for _, i := range got.Interfaces {
					names = append(names, i.Name)
				}
				if diff := cmp.Diff(wantIfs, names); diff != "" {
					t.Errorf("interfaces (-want +got):\n%s", diff)
				}
				if len(got.IPs) != 1 {
					t.Fatalf("%d IPs, want 1: %s", len(got.IPs), raw)
				}
				ip := got.IPs[0]
				if ip.Interface == nil || *ip.Interface != carrier {
					t.Errorf("ips[0].interface = %v, want %d (%s)", ip.Interface, carrier, wantIfs[carrier])
				}
				if ip.Address != "10.244.3.7/24" || ip.Gateway != "10.244.3.1" {
					t.Errorf("ips[0] = %s via %s, want 10.244.3.7/24 via 10.244.3.1", ip.Address, ip.Gateway)
				}
				// 0.3.x and 0.4.0 results carry the IP version; 1.x
				// dropped the field.
				hasVersion := !strings.HasPrefix(v, "1.")
				switch {
				case hasVersion && (ip.Version == nil || *ip.Version != "4"):
					t.Errorf("ips[0].version = %v, want \"4\" in %s", ip.Version, v)
				case !hasVersion && ip.Version != nil:
					t.Errorf("ips[0].version = %q, want none in %s", *ip.Version, v)
				}
				if vm {
					if tap := got.Interfaces[3]; tap.Mac != "02:76:0a:f4:03:07" || tap.Sandbox == "" {
						t.Errorf("TAP entry %+v: want the VM's MAC 02:76:0a:f4:03:07 and the pod's netns", tap)
					}
				}
				// The spec added "mtu" to interfaces in 1.1.0; the cni
				// library (v1.3.0) renders 1.0.0 and 1.1.0 from one type and
				// so prints it for 1.0.0 as well, and drops it for 0.x.
				hasMTU := strings.HasPrefix(v, "1.")
				for _, i := range got.Interfaces {
					switch {
					case hasMTU && (i.Mtu == nil || *i.Mtu != 1450):
						t.Errorf("interface %s: mtu %v, want 1450 in %s", i.Name, i.Mtu, v)
					case !hasMTU && i.Mtu != nil:
						t.Errorf("interface %s: mtu %d in %s, which has no such field", i.Name, *i.Mtu, v)
					}
				}
				wantRoutes := []route{{Dst: "0.0.0.0/0", GW: "10.244.3.1"}}
				if diff := cmp.Diff(wantRoutes, got.Routes); diff != "" {
					t.Errorf("routes (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(c.DNS, got.DNS); diff != "" {
					t.Errorf("dns (-want +got):\n%s", diff)
				}
				sandboxed := []bool{false, false, true, true}
				for i, x := range got.Interfaces {
					if (x.Sandbox != "") != sandboxed[i] {
						t.Errorf("interface %s: sandbox %q", x.Name, x.Sandbox)
					}
				}
			})
		}
	}
}

// TestResultNoDNS: with no dns in the config the result carries no DNS.
// The cni library leaves the key out for 1.x and prints an empty object
// for 0.x (its 0.4.0 type has no MarshalJSON); both mean "none".
func TestResultNoDNS(t *testing.T) {
	c, err := ParseConfig(netconf(t, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range specVersions {
		conv, err := BuildResult(c, resultAttached(false), netip.MustParseAddr("10.244.3.7"), netip.Addr{}).GetAsVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(conv)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		d, ok := m["dns"]
		switch {
		case strings.HasPrefix(v, "1.") && ok:
			t.Errorf("%s: dns %s, want no dns key", v, d)
		case !strings.HasPrefix(v, "1.") && string(d) != "{}":
			t.Errorf("%s: dns %s, want {}", v, d)
		}
	}
}
