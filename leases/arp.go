package leases

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Neighbor is an entry of the node's ARP table: an IPv4 address, the MAC
// the node last resolved it to, and the interface's index.
type Neighbor struct {
	IP    netip.Addr
	MAC   string
	Index int
}

// FindIP returns the IPv4 address of the guest whose NIC has the MAC mac:
// the address of its live lease in the lease file at path (see Read), or,
// when no lease names the MAC, the address the node's ARP table holds for
// it on a vmnet bridge (an interface named bridge*, macOS only). The
// fallback finds a guest that bootpd recorded under a client identifier
// carrying no MAC (a DUID-EN or DUID-UUID, see ParseBootpd) once the node
// has exchanged a packet with it. from says which answered: "lease" or
// "arp". A MAC that neither knows is ok false.
func FindIP(path, mac string) (ip netip.Addr, from string, ok bool, err error) {
	m, err := NormalizeMAC(mac)
	if err != nil {
		return netip.Addr{}, "", false, err
	}
	snap, err := Read(path)
	if err != nil {
		return netip.Addr{}, "", false, err
	}
	l, err := snap.LookupMAC(m)
	switch {
	case err == nil:
		return l.IP, "lease", true, nil
	case errors.Is(err, ErrAmbiguousMAC):
		// Not the ARP table either: the forger's guest may be the one
		// the node last talked to.
		return netip.Addr{}, "", false, fmt.Errorf("%s: %w", m, err)
	}
	ns, err := arpTable()
	if err != nil {
		return netip.Addr{}, "", false, fmt.Errorf("no lease for %s, and the ARP table: %w", m, err)
	}
	if ip, ok := neighborOn(ns, m, ifAddrs); ok {
		return ip, "arp", true, nil
	}
	return netip.Addr{}, "", false, nil
}

// The node's ARP table and an interface's addresses (readARP,
// interfaceAddrs); tests replace them.
var (
	arpTable = readARP
	ifAddrs  = interfaceAddrs
)

// neighborOn is the address of mac among ns on a VM network's bridge: an
// interface (addrsOf gives its addresses by index) that holds the gateway,
// the first host, of the neighbour's subnet, as vmnet gives the host of
// every network it makes. The bridge is found by that address, not by its
// name: macOS 26's vmnet_network networks are not bound to vmnet's
// bridge1NN names, and a Mac's LAN interface, whose subnet's first host is
// the router, is left out.
func neighborOn(ns []Neighbor, mac string, addrsOf func(int) []netip.Prefix) (netip.Addr, bool) {
	for _, n := range ns {
		if n.MAC != mac {
			continue
		}
		for _, a := range addrsOf(n.Index) {
			if a.Contains(n.IP) && a.Addr() == a.Masked().Addr().Next() {
				return n.IP, true
			}
		}
	}
	return netip.Addr{}, false
}

// Layout of the routing messages of macOS's ARP table dump
// (sysctl CTL_NET, PF_ROUTE, 0, AF_INET, NET_RT_FLAGS, RTF_LLINFO, as
// network_cmds' arp.c search() reads it), from xnu's bsd/net/route.h and
// bsd/net/if_dl.h: a struct rt_msghdr (92 bytes: rtm_msglen, version,
// type, index, then rtm_flags at 8 and rtm_addrs at 12, and the 56-byte
// rt_metrics), then the sockaddrs rtm_addrs names, each padded to 4
// bytes: RTA_DST a sockaddr_in(arp), RTA_GATEWAY a sockaddr_dl.
const (
	rtmHdrLen   = 92
	rtmVersion  = 5
	rtfLLInfo   = 0x400
	rtaDst      = 0x1
	rtaGateway  = 0x2
	afInet      = 2
	afLink      = 18
	sdlDataOff  = 8 // sdl_len, family, index (2), type, nlen, alen, slen
	rtaMaxAddrs = 8
)

// ParseARPDump reads the neighbours of a macOS ARP table dump, in the
// layout above. Entries without a resolved Ethernet address (an ARP
// request still waiting) are left out; a message that does not fit its
// buffer is an error.
func ParseARPDump(b []byte) ([]Neighbor, error) {
	var out []Neighbor
	for off := 0; off < len(b); {
		if len(b)-off < 4 {
			return out, fmt.Errorf("routing message at %d: %d bytes left, want a header", off, len(b)-off)
		}
		n := int(binary.LittleEndian.Uint16(b[off:]))
		if n < rtmHdrLen || off+n > len(b) {
			return out, fmt.Errorf("routing message at %d: length %d, %d bytes left", off, n, len(b)-off)
		}
		m := b[off : off+n]
		off += n
		if m[2] != rtmVersion {
			continue
		}
		flags := binary.LittleEndian.Uint32(m[8:])
		addrs := binary.LittleEndian.Uint32(m[12:])
		if flags&rtfLLInfo == 0 || addrs&(rtaDst|rtaGateway) != rtaDst|rtaGateway {
			continue
		}
		sas := m[rtmHdrLen:]
		var dst, gw []byte
		for i := 0; i < rtaMaxAddrs && addrs>>i != 0; i++ {
			if addrs&(1<<i) == 0 {
				continue
			}
			if len(sas) == 0 {
				break
			}
			l := int(sas[0])
			if l > len(sas) {
				return out, fmt.Errorf("routing message at %d: sockaddr of %d bytes, %d left", off-n, l, len(sas))
			}
			switch 1 << i {
			case rtaDst:
				dst = sas[:l]
			case rtaGateway:
				gw = sas[:l]
			}
			step := 4 // SA_SIZE: a zero length takes 4 bytes, else rounded up to 4
			if l > 0 {
				step = (l + 3) &^ 3
			}
			if step > len(sas) {
				step = len(sas)
			}
			sas = sas[step:]
		}
		if len(dst) < 8 || dst[1] != afInet || len(gw) < sdlDataOff || gw[1] != afLink {
			continue
		}
		nlen, alen := int(gw[5]), int(gw[6])
		if alen != 6 || sdlDataOff+nlen+alen > len(gw) {
			continue
		}
		a := gw[sdlDataOff+nlen : sdlDataOff+nlen+alen]
		out = append(out, Neighbor{
			IP:    netip.AddrFrom4([4]byte(dst[4:8])),
			MAC:   fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3], a[4], a[5]),
			Index: int(binary.LittleEndian.Uint16(gw[2:])),
		})
	}
	return out, nil
}
