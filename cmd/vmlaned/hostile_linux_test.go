package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/vmlane/vmlane/internal/testing/frametest"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/internal/testing/testvm"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// The hostile-guest suite: one node (vmlaned standalone, the CNI plugin),
// a victim VM pod and an attacker VM pod, and every attack a guest can
// make on its neighbours, run with anti-spoofing on and off. With it on
// each attack is stopped; with it off each one works, so it is the rules
// that stop them, not the test's setup. The attacker's frames are written
// raw to its pod's veth, where its VM's frames enter the bridge; one
// attacker is a real QEMU guest that takes its neighbour's address.

// hostilePod is a VM pod made by the CNI plugin: its netns, whose eth0
// carries its VM's frames, and its lease's MAC and address.
type hostilePod struct {
	ns  *netnstest.NS
	tap string
	mac net.HardwareAddr
	ip  netip.Addr
	pod string
	eth *frametest.Socket
}

type hostileNode struct {
	d                *standalone
	gw               netip.Addr
	victim, attacker *hostilePod
	on               bool
}

func newHostileNode(t *testing.T, on bool, cidrs string) *hostileNode {
	t.Helper()
	bin := buildBinaries(t)
	node := netnstest.New(t, "node")
	cidr, _, _ := strings.Cut(cidrs, ",")
	prefix := netip.MustParsePrefix(cidr)
	n := &hostileNode{gw: prefix.Addr().Next(), on: on}
	// A dynamic range too, the worst case for a flood: each forged
	// chaddr that reaches the server is a lease written to disk.
	dyn := prefix.Addr().As4()
	dyn[3] = 200
	first := netip.AddrFrom4(dyn)
	dyn[3] = 250
	n.d = startStandalone(t, bin, node, cidrs, "--anti-spoof="+strconv.FormatBool(on), "--lease-time", "1m",
		"--dhcp-range", first.String()+"-"+netip.AddrFrom4(dyn).String())
	mk := func(name string) *hostilePod {
		p := &hostilePod{ns: netnstest.New(t, name), pod: "vm-" + name}
		tap, ip := n.d.cniAdd(t, p.ns, "cid-"+name, p.pod)
		p.tap, p.ip = tap.Name, netip.MustParseAddr(ip)
		p.mac, _ = net.ParseMAC(tap.Mac)
		p.eth = frametest.OpenIn(t, p.ns, "eth0")
		return p
	}
	n.victim, n.attacker = mk("victim"), mk("attacker")
	return n
}

func (p *hostilePod) send(t *testing.T, src net.HardwareAddr, etherType uint16, payload []byte) {
	t.Helper()
	if err := p.eth.Send(frametest.Ether(frametest.Broadcast, src, etherType, payload)); err != nil {
		t.Fatal(err)
	}
}

// sees reports whether p's eth0 receives a frame holding probe within d.
func (p *hostilePod) sees(d time.Duration, probe []byte) bool {
	_, err := p.eth.Wait(d, func(f []byte) bool { return bytes.Contains(f, probe) })
	return err == nil
}

// dhcpMsg builds a DHCP message from a client.
func dhcpMsg(t *testing.T, typ dhcpv4.MessageType, chaddr net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithMessageType(typ), dhcpv4.WithHwAddr(chaddr)}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// exchange runs DISCOVER/OFFER/REQUEST/ACK for the victim from its own
// port, as its VM's DHCP client would, while the attacker listens on its
// port. It returns whether the attacker saw the victim's OFFER or ACK.
func (n *hostileNode) exchange(t *testing.T) (sniffed bool) {
	t.Helper()
	v := n.victim
	sniff := make(chan bool, 1)
	go func() {
		// The victim's pod name is in every reply (option 12).
		sniff <- n.attacker.sees(6*time.Second, []byte(v.pod))
	}()
	reply := func(req *dhcpv4.DHCPv4, want dhcpv4.MessageType) *dhcpv4.DHCPv4 {
		t.Helper()
		any4, bcast := netip.IPv4Unspecified(), netip.AddrFrom4([4]byte{255, 255, 255, 255})
		v.send(t, v.mac, frametest.TypeIPv4, frametest.UDP4(any4, bcast, 68, 67, req.ToBytes()))
		var got *dhcpv4.DHCPv4
		_, err := v.eth.Wait(3*time.Second, func(b []byte) bool {
			f, _ := frametest.Parse(b)
			_, dst, payload, ok := f.UDP()
			if !ok || dst.Port() != 68 {
				return false
			}
			m, err := dhcpv4.FromBytes(payload)
			if err != nil || m.TransactionID != req.TransactionID || m.MessageType() != want {
				return false
			}
			got = m
			return true
		})
		if err != nil {
			t.Fatalf("victim got no %s to its %s: %v", want, req.MessageType(), err)
		}
		return got
	}
	offer := reply(dhcpMsg(t, dhcpv4.MessageTypeDiscover, v.mac), dhcpv4.MessageTypeOffer)
	if got := offer.YourIPAddr.String(); got != v.ip.String() {
		t.Fatalf("victim offered %s, want its reserved %s", got, v.ip)
	}
	req, err := dhcpv4.NewRequestFromOffer(offer)
	if err != nil {
		t.Fatal(err)
	}
	reply(req, dhcpv4.MessageTypeAck)
	// The bind is written just after the ACK (the deferred bind).
	eventually(t, "the victim's lease bound", func() (bool, string) {
		l := n.lease(t, v.mac)
		return l.State == leases.StateBound, fmt.Sprintf("lease %+v", l)
	})
	return <-sniff
}

func (n *hostileNode) lease(t *testing.T, mac net.HardwareAddr) leases.Lease {
	t.Helper()
	snap, err := leases.Read(n.d.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range snap.Leases() {
		if l.MAC == mac.String() {
			return l
		}
	}
	t.Fatalf("no lease for %s", mac)
	return leases.Lease{}
}

// rss is vmlaned's resident set in kB.
func (n *hostileNode) rss(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// attackResult is one attack's outcome: did it work?
type attackResult struct {
	name   string
	worked bool
}

// attacks runs every raw-frame attack and reports which worked.
func (n *hostileNode) attacks(t *testing.T) []attackResult {
	v, a := n.victim, n.attacker
	var out []attackResult
	record := func(name string, worked bool) { out = append(out, attackResult{name, worked}) }
	quiet := 500 * time.Millisecond
	bcast := netip.AddrFrom4([4]byte{255, 255, 255, 255})
	any4 := netip.IPv4Unspecified()

	mark := []byte("hostile: ip spoof")
	a.send(t, a.mac, frametest.TypeIPv4, frametest.UDP4(v.ip, bcast, 9, 9, mark))
	record("IP spoof (neighbour's address)", v.sees(quiet, mark))

	mark = []byte("hostile: mac spoof")
	a.send(t, v.mac, frametest.TypeIPv4, frametest.UDP4(v.ip, bcast, 9, 9, mark))
	record("MAC spoof (neighbour's MAC and address)", v.sees(quiet, mark))

	// The node's ARP entry for the victim, then a gratuitous ARP that
	// says the victim's address is at the attacker's MAC.
	n.d.node.MustRun(t, "ip", "neigh", "replace", v.ip.String(), "lladdr", v.mac.String(), "dev", "vmlane0", "nud", "stale")
	a.send(t, a.mac, frametest.TypeARP, frametest.ARP(1, a.mac, v.ip, frametest.Broadcast, v.ip))
	time.Sleep(quiet)
	neigh := n.d.node.MustRun(t, "ip", "neigh", "show", v.ip.String(), "dev", "vmlane0")
	record("ARP poisoning of the gateway (node's entry for a neighbour)", strings.Contains(neigh, a.mac.String()))

	arp := frametest.ARP(2, a.mac, n.gw, frametest.Broadcast, n.gw)
	a.send(t, a.mac, frametest.TypeARP, arp)
	record("ARP poisoning of a neighbour (claims the gateway)", v.sees(quiet, arp))

	offer := dhcpMsg(t, dhcpv4.MessageTypeOffer, v.mac, dhcpv4.WithReply(dhcpMsg(t, dhcpv4.MessageTypeDiscover, v.mac)),
		dhcpv4.WithYourIP(net.IP(a.ip.AsSlice())), dhcpv4.WithServerIP(net.IP(a.ip.AsSlice())))
	a.send(t, a.mac, frametest.TypeIPv4, frametest.UDP4(a.ip, bcast, 67, 68, offer.ToBytes()))
	record("rogue DHCP server answering a neighbour", v.sees(quiet, offer.ToBytes()[4:8]))

	// The victim binds its lease, the attacker listening.
	record("sniffing a neighbour's OFFER and ACK", n.exchange(t))

	release := dhcpMsg(t, dhcpv4.MessageTypeRelease, v.mac, dhcpv4.WithClientIP(net.IP(v.ip.AsSlice())),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP(n.gw.AsSlice()))))
	a.send(t, a.mac, frametest.TypeIPv4, frametest.UDP4(a.ip, bcast, 68, 67, release.ToBytes()))
	time.Sleep(quiet)
	record("forged RELEASE of a neighbour's lease", n.lease(t, v.mac).State != leases.StateBound)
	if n.lease(t, v.mac).State != leases.StateBound {
		n.exchange(t) // bound again, for the next attack
	}

	decline := dhcpMsg(t, dhcpv4.MessageTypeDecline, v.mac,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IP(v.ip.AsSlice()))),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP(n.gw.AsSlice()))))
	a.send(t, a.mac, frametest.TypeIPv4, frametest.UDP4(any4, bcast, 68, 67, decline.ToBytes()))
	time.Sleep(quiet)
	record("forged DECLINE of a neighbour's address", n.lease(t, v.mac).State == leases.StateDeclined)

	// On a dual-stack node: the node's neighbour entry for the victim's
	// IPv6 address, then an unsolicited NA (override) from the attacker
	// for that address, carrying the attacker's MAC.
	if v6 := n.lease(t, v.mac).IP6; v6.IsValid() {
		n.d.node.MustRun(t, "ip", "-6", "neigh", "replace", v6.String(), "lladdr", v.mac.String(), "dev", "vmlane0", "nud", "stale")
		na := frametest.NeighAdvert(netip.MustParseAddr("fe80::bad"), netip.MustParseAddr("ff02::1"), v6, true, false, frametest.LLAddrOption(2, a.mac))
		a.send(t, a.mac, frametest.TypeIPv6, na)
		time.Sleep(quiet)
		neigh := n.d.node.MustRun(t, "ip", "-6", "neigh", "show", v6.String(), "dev", "vmlane0")
		record("NA poisoning (node's entry for a neighbour's IPv6 address)", strings.Contains(neigh, a.mac.String()))
	}
	return out
}

// hairpinLeaks reports what of other ports' unicast the attacker's port
// received. Every port has hairpin on, which lets the bridge send a frame
// back out the port it came in by: it does so for a frame to that port's
// own MAC (kube-proxy's DNAT of a pod to itself) and for floods
// (broadcast and multicast come back to their sender, as with the
// reference bridge plugin's hairpinMode), never for a frame to another
// port's MAC. Checked: the attacker's own frame to the victim, which must
// reach the victim and not come back, and the victim's to the gateway.
func (n *hostileNode) hairpinLeaks(t *testing.T) (leaked []string) {
	t.Helper()
	v, a := n.victim, n.attacker
	quiet := 500 * time.Millisecond
	fields := strings.Fields(n.d.node.MustRun(t, "ip", "-br", "link", "show", "vmlane0"))
	if len(fields) < 3 {
		t.Fatalf("ip -br link show vmlane0: %q", fields)
	}
	gwMAC, err := net.ParseMAC(fields[2])
	if err != nil {
		t.Fatal(err)
	}

	mark := []byte("hairpin: attacker to victim")
	reached := make(chan bool, 1)
	go func() { reached <- v.sees(2*quiet, mark) }()
	time.Sleep(50 * time.Millisecond)
	if err := a.eth.Send(frametest.Ether(v.mac, a.mac, frametest.TypeIPv4, frametest.UDP4(a.ip, v.ip, 9, 9, mark))); err != nil {
		t.Fatal(err)
	}
	if a.sees(quiet, mark) {
		leaked = append(leaked, "its own unicast to the victim, back")
	}
	if !<-reached {
		t.Errorf("the attacker's unicast to the victim did not reach it: the check proves nothing")
	}

	// The frame itself, not the node's ICMP error quoting it (which,
	// with anti-spoofing off, the ARP poisoning above sends the attacker).
	mark = []byte("hairpin: victim to gateway")
	if err := v.eth.Send(frametest.Ether(gwMAC, v.mac, frametest.TypeIPv4, frametest.UDP4(v.ip, n.gw, 9, 9, mark))); err != nil {
		t.Fatal(err)
	}
	if _, err := a.eth.Wait(quiet, func(b []byte) bool {
		f, _ := frametest.Parse(b)
		_, dst, payload, ok := f.UDP()
		return ok && dst.Port() == 9 && bytes.Equal(payload, mark)
	}); err == nil {
		leaked = append(leaked, "the victim's unicast to the gateway")
	}

	// What hairpin does send back: the attacker's own broadcast.
	mark = []byte("hairpin: attacker's broadcast")
	a.send(t, a.mac, frametest.TypeIPv4, frametest.UDP4(a.ip, netip.AddrFrom4([4]byte{255, 255, 255, 255}), 9, 9, mark))
	if !a.sees(quiet, mark) {
		t.Errorf("the attacker's broadcast did not come back to it: is hairpin off on its port?")
	}
	return leaked
}

// linkLocalAttack sends, from the attacker's port, a frame with the
// victim's MAC as its source to each 802.1D link-local group address and
// reports the groups that put the victim's MAC on the attacker's port in
// the bridge's forwarding database: the node's traffic to the victim
// would go to the attacker.
func (n *hostileNode) linkLocalAttack(t *testing.T) (learned []string) {
	v, a := n.victim, n.attacker
	port := plugin.HostVethName(leases.Key{ContainerID: "cid-attacker", IfName: "eth0"})
	for g := range 16 {
		group := net.HardwareAddr{0x01, 0x80, 0xc2, 0x00, 0x00, byte(g)}
		if err := a.eth.Send(frametest.Ether(group, v.mac, 0x88cc, []byte("hostile: link-local"))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if fdb := n.d.node.MustRun(t, "bridge", "fdb", "show", "br", "vmlane0", "dev", port); strings.Contains(fdb, v.mac.String()) {
			learned = append(learned, fmt.Sprintf("%02x", g))
		}
	}
	return learned
}

// flood sends count DISCOVERs with distinct forged chaddrs from the
// attacker's port, and times a CNI ADD made while it runs.
func (n *hostileNode) flood(t *testing.T, count int) (addDuring time.Duration) {
	t.Helper()
	a := n.attacker
	added := make(chan time.Duration, 1)
	go func() {
		time.Sleep(500 * time.Millisecond) // into the flood
		start := time.Now()
		n.d.cniAdd(t, netnstest.New(t, "during"), "cid-during", "vm-during")
		added <- time.Since(start)
	}()
	any4, bcast := netip.IPv4Unspecified(), netip.AddrFrom4([4]byte{255, 255, 255, 255})
	mac := make(net.HardwareAddr, 6)
	m := dhcpMsg(t, dhcpv4.MessageTypeDiscover, mac)
	for i := range count {
		mac[0], mac[2], mac[3], mac[4], mac[5] = 0x02, byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		m.ClientHWAddr = mac
		frame := frametest.Ether(frametest.Broadcast, a.mac, frametest.TypeIPv4, frametest.UDP4(any4, bcast, 68, 67, m.ToBytes()))
		if err := a.eth.Send(frame); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("flood packet %d: %v", i, err)
		}
	}
	return <-added
}

// bothWays runs fn on a hostile node with anti-spoofing on (subnet
// cidrs[0]) and on one with it off (cidrs[1]), in parallel.
func bothWays(t *testing.T, cidrs [2]string, fn func(t *testing.T, n *hostileNode)) {
	for i, on := range []bool{true, false} {
		t.Run("antiSpoof="+strconv.FormatBool(on), func(t *testing.T) {
			t.Parallel()
			fn(t, newHostileNode(t, on, cidrs[i]))
		})
	}
}

func TestHostileGuests(t *testing.T) {
	privtest.Require(t, "ip", "iptables")
	bothWays(t, [2]string{"10.250.50.0/24,fd00:250:50::/64", "10.250.51.0/24,fd00:250:51::/64"}, func(t *testing.T, n *hostileNode) {
		for _, r := range n.attacks(t) {
			t.Logf("%-60s worked=%v", r.name, r.worked)
			if r.worked == n.on {
				t.Errorf("%s: worked=%v with anti-spoofing on=%v", r.name, r.worked, n.on)
			}
		}
		// Hairpin, on every port so that a pod reaches its own Service,
		// gives no port a neighbour's frames, anti-spoofing or not.
		if leaked := n.hairpinLeaks(t); len(leaked) > 0 {
			t.Errorf("with hairpin on every port, the attacker received %q", leaked)
		}
		// Every vmlane bridge has no_linklocal_learn on, anti-spoofing or
		// not (with it off, a plain frame from the victim's MAC does the
		// same, as the MAC spoof above shows); internal/antispoof's
		// TestLinkLocalFramesLearnNothing shows it working without.
		learned := n.linkLocalAttack(t)
		t.Logf("%-60s groups %v", "link-local frames with the neighbour's MAC learnt from", learned)
		if n.on && len(learned) > 0 {
			t.Errorf("with anti-spoofing on, link-local frames to groups %v put the victim's MAC on the attacker's port", learned)
		}
		start := time.Now()
		n.d.cniAdd(t, netnstest.New(t, "quiet"), "cid-quiet", "vm-quiet")
		quiet := time.Since(start)
		before := n.rss(t)
		during := n.flood(t, 1_000_000)
		time.Sleep(2 * time.Second) // vmlaned drains its socket
		t.Logf("anti-spoofing on=%v, flood of 1,000,000 forged chaddrs: vmlaned RSS %d kB before, %d kB after; CNI ADD %v quiet, %v during the flood",
			n.on, before, n.rss(t), quiet.Round(time.Millisecond), during.Round(time.Millisecond))
		if n.on {
			// The flood never reached the server: the victim gets its
			// lease at once.
			n.exchange(t)
		}
	})
}

// TestHostileQEMUGuest: a real guest that takes its neighbour's address
// (its own MAC, the neighbour's IP) cannot reach the gateway while
// anti-spoofing is on, and can when it is off.
func TestHostileQEMUGuest(t *testing.T) {
	g := testvm.Need(t, "ip", "iptables", "nsenter")
	bothWays(t, [2]string{"10.250.52.0/24", "10.250.53.0/24"}, func(t *testing.T, n *hostileNode) {
		a := n.attacker
		res, err := g.Run(t.Context(), testvm.Config{
			NetNS: a.ns.Path, Tap: a.tap, MAC: a.mac.String(), Mode: testvm.ModeStatic,
			IP: n.victim.ip.String() + "/24", Gateway: n.gw.String(), Timeout: 3 * time.Minute,
		})
		if err != nil {
			t.Fatalf("guest: %v", err)
		}
		p, ok := res.Ping(n.gw.String())
		if !ok {
			t.Fatalf("guest did not ping %s: %+v", n.gw, res)
		}
		t.Logf("anti-spoofing on=%v: guest on %s's address pinging the gateway: %d/%d replies", n.on, n.victim.pod, p.Recv, p.Sent)
		if p.OK == n.on {
			t.Errorf("guest with its neighbour's address reached the gateway=%v with anti-spoofing on=%v", p.OK, n.on)
		}
	})
}
