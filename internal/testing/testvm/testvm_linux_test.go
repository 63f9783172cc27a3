package testvm

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// These tests boot the real guest: they need root (a network namespace and
// a TAP device), ip, QEMU and busybox, and a built guest ($VMLANE_GUEST_DIR,
// `make guest`). Without them they skip, or fail under
// VMLANE_PRIVILEGED=require (privtest). They touch nothing outside the
// namespaces they create.

// requireGuest checks for root and the tools, and returns the built guest.
func requireGuest(t *testing.T) Guest {
	t.Helper()
	return Need(t, "ip", "nsenter", "busybox")
}

// newNetNS creates a network namespace that t.Cleanup deletes again, with
// everything in it (netnstest also sweeps what a killed run left).
func newNetNS(t *testing.T) string {
	t.Helper()
	return netnstest.New(t, "tvm").Name
}

// addTap creates a TAP device in ns with address cidr (none if empty) and
// brings it up.
// It asks for vnet_hdr, as a CNI plugin would for virtio offloads, and
// does without where the kernel or iproute2 lacks it.
func addTap(t *testing.T, ns, dev, cidr string) {
	t.Helper()
	if err := exec.Command("ip", "-n", ns, "tuntap", "add", "dev", dev, "mode", "tap", "vnet_hdr").Run(); err != nil {
		ip(t, "-n", ns, "tuntap", "add", "dev", dev, "mode", "tap")
	}
	if cidr != "" {
		ip(t, "-n", ns, "addr", "add", cidr, "dev", dev)
	}
	ip(t, "-n", ns, "link", "set", dev, "up")
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func TestGuestStaticPingsGateway(t *testing.T) {
	g := requireGuest(t)
	ns := newNetNS(t)
	addTap(t, ns, "tap0", "10.99.0.1/24")

	res, err := g.Run(t.Context(), Config{
		NetNS:   ns,
		Tap:     "tap0",
		MAC:     "52:54:00:99:00:02",
		IP:      "10.99.0.2/24",
		Gateway: "10.99.0.1",
		Timeout: 90 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start to VMLANE-READY %v, to VMLANE-DONE %v (guest uptime %v)",
		res.ReadyAfter.Round(time.Millisecond), res.DoneAfter.Round(time.Millisecond), res.Uptime)

	wantNet := &NetInfo{
		Iface:   "eth0",
		MAC:     "52:54:00:99:00:02",
		Addrs:   []netip.Prefix{netip.MustParsePrefix("10.99.0.2/24")},
		Gateway: netip.MustParseAddr("10.99.0.1"),
		Mode:    ModeStatic,
	}
	if !reflect.DeepEqual(res.Net, wantNet) {
		t.Errorf("Net = %+v, want %+v", res.Net, wantNet)
	}
	if p, ok := res.Ping("10.99.0.1"); !ok || !p.OK || p.Recv == 0 {
		t.Errorf("ping of the gateway: %+v (reported %v), want ok", p, ok)
	}
	if len(res.Errors) > 0 {
		t.Errorf("guest errors: %q", res.Errors)
	}
	if t.Failed() {
		t.Logf("console:\n%s", res.Console)
	}
}

// TestGuestHoldAnswersPings checks the Start/Ready/Stop path that e2e tests
// use: the held guest stays up and the namespace can ping it.
func TestGuestHoldAnswersPings(t *testing.T) {
	g := requireGuest(t)
	ns := newNetNS(t)
	addTap(t, ns, "tap0", "10.99.0.1/24")

	vm, err := g.Start(t.Context(), Config{
		NetNS:   ns,
		Tap:     "tap0",
		IP:      "10.99.0.3/24",
		Gateway: "10.99.0.1",
		Hold:    true,
		Timeout: 90 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Stop() })

	res, err := vm.Ready(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Net == nil || res.Net.MAC != vm.Config().MAC {
		t.Errorf("Net = %+v, want mac %s", res.Net, vm.Config().MAC)
	}
	// busybox's ping: build-guest.sh installs busybox-static anyway, and the
	// host need not have iputils.
	out, err := exec.Command("ip", "netns", "exec", ns, "busybox", "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.99.0.3").CombinedOutput()
	if err != nil {
		t.Errorf("pinging the held guest: %v\n%s", err, out)
	}
	if _, err := vm.Held(t.Context()); err != nil {
		t.Error(err)
	}

	res, err = vm.Stop()
	if err != nil {
		t.Errorf("Stop: %v", err)
	}
	if res.Done {
		t.Errorf("held guest reported VMLANE-DONE")
	}
	if p, ok := res.Ping("10.99.0.1"); !ok || !p.OK {
		t.Errorf("ping of the gateway: %+v (reported %v), want ok", p, ok)
	}
	if t.Failed() {
		t.Logf("console:\n%s", res.Console)
	}
}

// TestGuestDHCPLease runs the guest's DHCP client against busybox udhcpd in
// the namespace, a stand-in until vmlane's own server can serve the guest.
// It checks the lease the guest reports and that, as RFC 3442 requires, it
// took its default route from option 121 rather than option 3.
func TestGuestDHCPLease(t *testing.T) {
	g := requireGuest(t)
	ns := newNetNS(t)
	addTap(t, ns, "tap0", "10.99.0.1/24")
	startUdhcpd(t, ns, `interface tap0
start 10.99.0.50
end 10.99.0.59
opt subnet 255.255.255.0
opt router 10.99.0.254
opt dns 10.99.0.1 10.99.0.2
opt domain vmlane.test
opt hostname guest1
opt mtu 1400
opt lease 600
opt staticroutes 0.0.0.0/0 10.99.0.1 10.98.0.0/16 10.99.0.1
`)

	res, err := g.Run(t.Context(), Config{
		NetNS:   ns,
		Tap:     "tap0",
		Mode:    ModeDHCP,
		Timeout: 90 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start to VMLANE-READY %v, to VMLANE-DONE %v", res.ReadyAfter.Round(time.Millisecond), res.DoneAfter.Round(time.Millisecond))

	if res.DHCP == nil {
		t.Fatalf("no lease; console:\n%s", res.Console)
	}
	got := *res.DHCP
	if !netip.MustParsePrefix("10.99.0.48/28").Contains(got.IP) {
		t.Errorf("leased ip %v, want one of 10.99.0.50-59", got.IP)
	}
	got.IP = netip.Addr{}
	if res.Net != nil && got.Iface != res.Net.Iface {
		t.Errorf("lease on %q, the NIC is %q", got.Iface, res.Net.Iface)
	}
	got.Iface = ""
	want := Lease{
		Bits:     24,
		Routers:  []netip.Addr{netip.MustParseAddr("10.99.0.254")},
		DNS:      []netip.Addr{netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")},
		Domain:   "vmlane.test",
		Hostname: "guest1",
		MTU:      1400,
		Lease:    600 * time.Second,
		ServerID: netip.MustParseAddr("10.99.0.1"),
		Routes: []Route{
			{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("10.99.0.1")},
			{Dst: netip.MustParsePrefix("10.98.0.0/16"), Gateway: netip.MustParseAddr("10.99.0.1")},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lease (ip aside)\n got %+v\nwant %+v", got, want)
	}
	if res.Net == nil || res.Net.Gateway != netip.MustParseAddr("10.99.0.1") {
		t.Errorf("Net = %+v, want gateway 10.99.0.1 from option 121, not the option 3 router", res.Net)
	}
	if p, ok := res.Ping("10.99.0.1"); !ok || !p.OK {
		t.Errorf("ping of the option 121 gateway: %+v (reported %v), want ok", p, ok)
	}
	if len(res.Errors) > 0 {
		t.Errorf("guest errors: %q", res.Errors)
	}
	if t.Failed() {
		t.Logf("console:\n%s", res.Console)
	}
}

// startUdhcpd runs busybox udhcpd with conf in ns until the test ends.
func startUdhcpd(t *testing.T, ns, conf string) {
	t.Helper()
	dir := t.TempDir()
	conf += fmt.Sprintf("lease_file %s/leases\npidfile %s/pid\n", dir, dir)
	path := dir + "/udhcpd.conf"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// udhcpd complains when it has no lease file to read yet.
	if err := os.WriteFile(dir+"/leases", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// -a 100: udhcpd ARP-probes an address before offering it and would
	// otherwise wait 2 s for an answer that never comes.
	cmd := exec.Command("ip", "netns", "exec", ns, "busybox", "udhcpd", "-f", "-a", "100", path)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting udhcpd: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("udhcpd:\n%s", out.String())
		}
	})
}

// TestGuestCommands checks what e2e tests do with held guests once all are
// up: guest A pings guest B and fetches B's whoami CGI, which must name A's
// address. Both sit on a bridge in one namespace.
func TestGuestCommands(t *testing.T) {
	g := requireGuest(t)
	ns := newNetNS(t)
	ip(t, "-n", ns, "link", "add", "br0", "type", "bridge")
	ip(t, "-n", ns, "addr", "add", "10.99.0.1/24", "dev", "br0")
	ip(t, "-n", ns, "link", "set", "br0", "up")
	start := func(tap, addr string, fetch ...string) *VM {
		t.Helper()
		addTap(t, ns, tap, "")
		ip(t, "-n", ns, "link", "set", tap, "master", "br0")
		vm, err := g.Start(t.Context(), Config{
			NetNS: ns, Tap: tap, IP: addr, Gateway: "10.99.0.1", PingCount: 1, Hold: true, Timeout: 90 * time.Second,
			Fetch: fetch,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if res, _ := vm.Stop(); t.Failed() {
				t.Logf("console of %s:\n%s", addr, res.Console)
			}
		})
		return vm
	}
	a := start("tap0", "10.99.0.2/24")
	if _, err := a.Held(t.Context()); err != nil {
		t.Fatal(err)
	}
	// B, once A serves, GETs A's whoami and a port nobody listens on at
	// boot (vmlane.fetch), as a guest in a pod does.
	b := start("tap1", "10.99.0.3/24", "http://10.99.0.2/cgi-bin/whoami", "http://10.99.0.1:9/")
	for _, vm := range []*VM{a, b} {
		res, err := vm.Held(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		// The boot-time ping of the gateway reports its round trip too.
		if p, ok := res.Ping("10.99.0.1"); !ok || !p.OK || p.RTT <= 0 {
			t.Errorf("boot ping of the gateway: %+v (reported %v), want ok with an rtt", p, ok)
		}
	}
	res, _ := b.Held(t.Context())
	want := []FetchResult{{URL: "http://10.99.0.2/cgi-bin/whoami", OK: true, Body: "10.99.0.3"}, {URL: "http://10.99.0.1:9/"}}
	if len(res.Fetches) != 2 || res.Fetches[0] != want[0] || res.Fetches[1].URL != want[1].URL || res.Fetches[1].OK || res.Fetches[1].Err == "" {
		t.Errorf("B's boot-time fetches: %+v; want %+v, the second with wget's error", res.Fetches, want)
	}

	began := time.Now()
	p, err := a.Ping(t.Context(), "10.99.0.3", 2)
	if err != nil || !p.OK || p.Recv == 0 || p.RTT <= 0 {
		t.Errorf("A pings B: %+v, %v; want ok with an rtt", p, err)
	}
	pinged := time.Now()
	who, err := a.Fetch(t.Context(), "http://10.99.0.3/cgi-bin/whoami")
	if err != nil || who != "10.99.0.2" {
		t.Errorf("A fetches B's whoami: %q, %v; want A's address 10.99.0.2", who, err)
	}
	fetched := time.Now()
	if _, err := a.Fetch(t.Context(), "http://10.99.0.3/nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("A fetches a missing page: %v, want a 404 error", err)
	}
	t.Logf("ping %v (rtt %v), fetch %v, failed fetch %v",
		pinged.Sub(began).Round(time.Millisecond), p.RTT, fetched.Sub(pinged).Round(time.Millisecond),
		time.Since(fetched).Round(time.Millisecond))
}
