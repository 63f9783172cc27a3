package leases

import (
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rtMsg is one message of a macOS ARP table dump, laid out as xnu's
// struct rt_msghdr, sockaddr_inarp and sockaddr_dl (see ParseARPDump):
// family 2 (AF_INET) or 30 (AF_INET6) for dst, flags, the link's index and
// its address (none for an unresolved entry).
func rtMsg(family byte, ip []byte, flags uint32, index uint16, mac []byte) []byte {
	dst := make([]byte, 16) // sockaddr_inarp: len, family, port, addr, srcaddr, tos, other
	dst[0], dst[1] = 16, family
	copy(dst[4:], ip)
	sdl := make([]byte, 20) // sockaddr_dl with its 12-byte minimum sdl_data
	sdl[0], sdl[1] = 20, afLink
	binary.LittleEndian.PutUint16(sdl[2:], index)
	sdl[4], sdl[6] = 6, byte(len(mac)) // IFT_ETHER, sdl_alen
	copy(sdl[sdlDataOff:], mac)
	m := make([]byte, rtmHdrLen, rtmHdrLen+len(dst)+len(sdl))
	m[2], m[3] = rtmVersion, 4 // RTM_GET
	binary.LittleEndian.PutUint16(m[4:], index)
	binary.LittleEndian.PutUint32(m[8:], flags)
	binary.LittleEndian.PutUint32(m[12:], rtaDst|rtaGateway)
	m = append(append(m, dst...), sdl...)
	binary.LittleEndian.PutUint16(m[0:], uint16(len(m)))
	return m
}

// testIfAddrs: index 7 is vmnet's bridge (the host holds the first host
// of 192.168.64.0/24), 9 a macOS 26 network's bridge of any name on a
// podCIDR, 4 the Mac's LAN (whose first host is the router).
func testIfAddrs(i int) []netip.Prefix {
	return map[int][]netip.Prefix{
		7: {netip.MustParsePrefix("192.168.64.1/24")},
		9: {netip.MustParsePrefix("fe80::1/64"), netip.MustParsePrefix("10.244.5.1/24")},
		4: {netip.MustParsePrefix("10.1.2.20/16")},
	}[i]
}

func arpDump() []byte {
	var b []byte
	b = append(b, rtMsg(afInet, []byte{192, 168, 64, 5}, rtfLLInfo|0x1, 7, []byte{0x52, 0x54, 0, 0xab, 0xcd, 0x1})...)
	b = append(b, rtMsg(afInet, []byte{192, 168, 64, 6}, rtfLLInfo, 7, nil)...)              // still resolving
	b = append(b, rtMsg(afInet, []byte{10, 0, 0, 9}, 0x1, 4, []byte{2, 0, 0, 0, 0, 9})...)   // not ARP
	b = append(b, rtMsg(30, []byte{0xfe, 0x80}, rtfLLInfo, 7, []byte{2, 0, 0, 0, 0, 10})...) // IPv6
	b = append(b, rtMsg(afInet, []byte{10, 1, 2, 3}, rtfLLInfo, 4, []byte{0xa, 0xb, 0xc, 0xd, 0xe, 0xf})...)
	b = append(b, rtMsg(afInet, []byte{10, 244, 5, 9}, rtfLLInfo, 9, []byte{2, 0, 0xa, 0xf4, 5, 9})...)
	return b
}

func TestParseARPDump(t *testing.T) {
	got, err := ParseARPDump(arpDump())
	if err != nil {
		t.Fatal(err)
	}
	want := []Neighbor{
		{IP: netip.MustParseAddr("192.168.64.5"), MAC: "52:54:00:ab:cd:01", Index: 7},
		{IP: netip.MustParseAddr("10.1.2.3"), MAC: "0a:0b:0c:0d:0e:0f", Index: 4},
		{IP: netip.MustParseAddr("10.244.5.9"), MAC: "02:00:0a:f4:05:09", Index: 9},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("ParseARPDump (-want +got):\n%s", diff)
	}
	for name, b := range map[string][]byte{
		"length beyond the buffer": arpDump()[:len(arpDump())-3],
		"length below a header":    {4, 0, 5, 0},
		"a stray byte":             append(arpDump(), 1),
	} {
		if _, err := ParseARPDump(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if ns, err := ParseARPDump(nil); err != nil || len(ns) != 0 {
		t.Errorf("empty dump: %v, %v", ns, err)
	}
}

// TestFindIPFallsBackToARP: a guest bootpd recorded under a DUID-EN
// client identifier (no MAC in it) is found on the vmnet bridge's ARP
// table, and on a macOS 26 network's bridge whatever its name (the bridge
// is found by its gateway address); one the lease file names is found
// there first; a MAC on another interface (the Mac's LAN) is not taken.
func TestFindIPFallsBackToARP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dhcpd_leases")
	os.WriteFile(path, []byte("{\n\tname=duid-en\n\tip_address=192.168.64.5\n\thw_address=ff,1:2:3:4:0:2:0:0:ab:11:72:3e:92:23:14:1d\n\tlease=0x7fffffff\n}\n"+
		"{\n\tname=mac\n\tip_address=192.168.64.7\n\thw_address=1,52:54:0:ab:cd:7\n\tlease=0x7fffffff\n}\n"), 0o644)
	arpTable = func() ([]Neighbor, error) { return ParseARPDump(arpDump()) }
	ifAddrs = testIfAddrs
	t.Cleanup(func() { arpTable, ifAddrs = readARP, interfaceAddrs })

	for _, tc := range []struct {
		mac, ip, from string
		ok            bool
	}{
		{"52:54:00:ab:cd:07", "192.168.64.7", "lease", true},
		{"52:54:00:AB:CD:01", "192.168.64.5", "arp", true},
		{"0a:0b:0c:0d:0e:0f", "", "", false},             // on the LAN
		{"02:00:0a:f4:05:09", "10.244.5.9", "arp", true}, // a macOS 26 network's bridge
		{"52:54:00:ff:ff:ff", "", "", false},
	} {
		ip, from, ok, err := FindIP(path, tc.mac)
		if err != nil || ok != tc.ok || from != tc.from || ok && ip.String() != tc.ip {
			t.Errorf("FindIP(%s) = %v, %q, %v, %v; want %s from %q", tc.mac, ip, from, ok, err, tc.ip, tc.from)
		}
	}
	if _, _, _, err := FindIP(path, "52:54"); err == nil {
		t.Error("FindIP of a bad MAC: no error")
	}
}

// FuzzParseARPDump: whatever the kernel's dump holds, the parser returns
// or errs, and every neighbour it returns is an IPv4 address with a
// canonical MAC.
func FuzzParseARPDump(f *testing.F) {
	f.Add(arpDump())
	f.Add(rtMsg(afInet, []byte{192, 168, 64, 5}, rtfLLInfo, 7, []byte{1, 2, 3, 4, 5, 6})[:rtmHdrLen+10])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ns, err := ParseARPDump(b)
		if err != nil {
			return
		}
		for _, n := range ns {
			if !n.IP.Is4() || len(n.MAC) != 17 {
				t.Errorf("neighbour %+v", n)
			}
		}
	})
}
