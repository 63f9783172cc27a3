package antispoof_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/vmlane/vmlane/internal/antispoof"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// BenchmarkTable: the cost of each operation on a table of 256 ports, in a
// namespace of its own. "add" is a CNI ADD's (a transaction that only
// adds); "remove" one port and "remove-16" sixteen in one transaction
// show what a deletion costs (an RCU grace period), and why removals are
// batched.
func BenchmarkTable(b *testing.B) {
	ns := netnstest.New(b, "bench")
	tb := antispoof.Table{NetNS: ns.Path}
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	port := func(i int) antispoof.Port {
		return antispoof.Port{Name: fmt.Sprintf("vml%011x", i), MAC: mac, IP: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
	}
	base := make([]antispoof.Port, 256)
	for i := range base {
		base[i] = port(i)
	}
	if _, err := tb.Sync(base, nil); err != nil {
		b.Fatal(err)
	}
	next := 1 << 20
	b.Run("add", func(b *testing.B) {
		for b.Loop() {
			next++
			if err := tb.Add(port(next)); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("remove-%d", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				names := make([]string, n)
				for i := range names {
					next++
					if err := tb.Add(port(next)); err != nil {
						b.Fatal(err)
					}
					names[i] = port(next).Name
				}
				b.StartTimer()
				if err := tb.Remove(names...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAttach: the cost of a port's ingress chain (Table.Attach, the
// CNI ADD's second transaction) on a table of 64 attached ports, against
// Add, a transaction that only adds set elements, measured alike: each
// iteration makes a veth first, untimed.
func BenchmarkAttach(b *testing.B) {
	ns := netnstest.New(b, "bench")
	tb := antispoof.Table{NetNS: ns.Path}
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	port := func(i int) antispoof.Port {
		return antispoof.Port{Name: fmt.Sprintf("vml%011x", i), MAC: mac, IP: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
	}
	next := 0
	veth := func(b *testing.B) antispoof.Port {
		b.Helper()
		next++
		p := port(next)
		ns.MustRun(b, "ip", "link", "add", p.Name, "type", "veth", "peer", "name", fmt.Sprintf("peer%011x", next))
		return p
	}
	for range 64 {
		p := veth(b)
		if err := tb.Add(p); err != nil {
			b.Fatal(err)
		}
		if err := tb.Attach(p); err != nil {
			b.Fatal(err)
		}
	}
	for _, op := range []string{"add", "attach"} {
		b.Run(op, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				p := veth(b)
				if op == "attach" {
					if err := tb.Add(p); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				var err error
				if op == "add" {
					err = tb.Add(p)
				} else {
					err = tb.Attach(p)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
