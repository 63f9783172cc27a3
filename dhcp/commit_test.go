package dhcp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// reservedStore is a lease file with n CNI reservations, 10.98.0.10 and up,
// MACs 02:00:00:00:00:<i>.
func reservedStore(t *testing.T, n int) (*leases.Store, []net.HardwareAddr, []netip.Addr) {
	t.Helper()
	st, err := leases.Open(filepath.Join(t.TempDir(), "leases.json"), netip.MustParsePrefix("10.98.0.0/24"), serverIP)
	if err != nil {
		t.Fatal(err)
	}
	var macs []net.HardwareAddr
	var ips []netip.Addr
	err = st.Update(func(tx *leases.Tx) error {
		for i := range n {
			mac := net.HardwareAddr{2, 0, 0, 0, 0, byte(i)}
			ip := netip.AddrFrom4([4]byte{10, 98, 0, byte(10 + i)})
			if _, err := tx.Reserve(leases.ReserveRequest{
				Key: leases.Key{ContainerID: fmt.Sprint("c", i), IfName: "eth0"}, MAC: mac.String(), IP: ip,
			}); err != nil {
				return err
			}
			macs, ips = append(macs, mac), append(ips, ip)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, macs, ips
}

// TestGroupCommitBatchesConcurrentBinds holds the first transaction until
// every other bind has queued, so the batching is certain, not timing: the
// first bind commits alone, the other n-1 in one transaction, and all of
// them are on disk when their calls return. A bind whose address is not its
// MAC's fails alone inside the batch.
func TestGroupCommitBatchesConcurrentBinds(t *testing.T) {
	const n = 16
	st, macs, ips := reservedStore(t, n)
	g := &groupCommit{store: st}
	var batches []int
	release := make(chan struct{})
	g.batched = func(size int) {
		batches = append(batches, size) // only the committer calls this
		if len(batches) == 1 {
			<-release
		}
	}
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	errs := make([]error, n)
	var wg sync.WaitGroup
	bind := func(i int) {
		defer wg.Done()
		ip := ips[i]
		if i == n-1 {
			ip = ips[0] // held for another MAC: must fail, alone
		}
		l, err := g.bind(macs[i].String(), ip, expires, fmt.Sprint("vm", i))
		if err == nil {
			// Durable on return: the file already says so.
			snap, rerr := leases.Read(st.Path())
			if rerr != nil {
				err = rerr
			} else if got, ok := snap.ByMAC(macs[i].String()); !ok || got.State != leases.StateBound || got != l {
				err = fmt.Errorf("bind returned %+v but the file has %+v", l, got)
			}
		}
		errs[i] = err
	}
	wg.Add(1)
	go bind(0)
	waitQueued := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
			g.mu.Lock()
			q, running := len(g.pending), g.running
			g.mu.Unlock()
			if running && q == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("queue has %d binds (running %v), want %d", q, running, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitQueued(0) // bind 0 is committing, held in batched
	for i := 1; i < n; i++ {
		wg.Add(1)
		go bind(i)
	}
	waitQueued(n - 1)
	close(release)
	wg.Wait()

	if len(batches) != 2 || batches[0] != 1 || batches[1] != n-1 {
		t.Errorf("batches %v, want [1 %d]", batches, n-1)
	}
	for i, err := range errs {
		if i == n-1 {
			if !errors.Is(err, leases.ErrConflict) {
				t.Errorf("bind of another MAC's address: err = %v, want ErrConflict", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("bind %d: %v", i, err)
		}
	}
}

// TestWatchSeesOtherWriters checks that a watched cache learns of the CNI
// plugin's writes (another Store on the same file, as another process is)
// by notification: a new reservation is found at once (a miss always checks
// the file), and a released one, which a clean cache would still hit, is
// gone as soon as the notification marks the cache dirty.
func TestWatchSeesOtherWriters(t *testing.T) {
	st, macs, _ := reservedStore(t, 1)
	a := NewStoreAllocator(st)
	if err := a.Watch(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !a.cache.watched.Load() {
		t.Skip("no change notification on this system")
	}
	if _, ok, err := a.Lookup(macs[0]); !ok || err != nil {
		t.Fatalf("lookup of a reservation: ok %v, err %v", ok, err)
	}
	plugin, err := leases.Open(st.Path(), st.Subnet(), st.Gateway())
	if err != nil {
		t.Fatal(err)
	}
	newMAC := net.HardwareAddr{2, 0, 0, 0, 1, 1}
	if _, err := plugin.Reserve(leases.ReserveRequest{Key: leases.Key{ContainerID: "new", IfName: "eth0"}, MAC: newMAC.String()}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := a.Lookup(newMAC); !ok || err != nil {
		t.Errorf("a reservation made just now: ok %v, err %v", ok, err)
	}
	if _, ok, err := plugin.Release(leases.Key{ContainerID: "c0", IfName: "eth0"}); !ok || err != nil {
		t.Fatalf("release: ok %v, err %v", ok, err)
	}
	for deadline := time.Now().Add(5 * time.Second); !a.cache.dirty.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no change notification after the release")
		}
	}
	if l, ok, _ := a.Lookup(macs[0]); ok {
		t.Errorf("released reservation still served: %+v", l)
	}
}

// TestDeferredBinds: with Defer, a CNI reservation's bind is acknowledged
// at once and on disk after Flush, exactly as returned; a dynamic lease's
// bind, whose only record is the file, is still on disk before Bind
// returns; and a bind of an address that is not the MAC's still fails.
func TestDeferredBinds(t *testing.T) {
	st, macs, ips := reservedStore(t, 3)
	a := NewStoreAllocator(st).Defer(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	var acked []leases.Lease
	for i := range macs {
		l, err := a.Bind(macs[i], ips[i], expires, fmt.Sprint("vm", i))
		if err != nil || l.State != leases.StateBound || l.IP != ips[i] {
			t.Fatalf("deferred bind %d: %+v, %v", i, l, err)
		}
		acked = append(acked, l)
	}
	// A RELEASE right after the ACK: the deferred bind must not land on
	// top of it.
	if _, ok, err := a.Release(macs[2]); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	acked[2].State, acked[2].Expires = leases.StateReserved, time.Time{}
	if _, err := a.Bind(macs[0], ips[1], expires, ""); !errors.Is(err, leases.ErrConflict) {
		t.Errorf("bind of another MAC's address: err = %v, want ErrConflict", err)
	}
	a.Flush()
	snap, err := leases.Read(st.Path())
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range acked {
		if got, _ := snap.ByMAC(macs[i].String()); got != want {
			t.Errorf("after Flush the file has %+v, the ACK said %+v", got, want)
		}
	}

	dyn := net.HardwareAddr{2, 0, 0, 0, 9, 9}
	pool := leases.Pool{First: netip.MustParseAddr("10.98.0.200"), Last: netip.MustParseAddr("10.98.0.210")}
	held, err := a.Allocate(dyn, netip.Addr{}, pool, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Bind(dyn, held.IP, expires, ""); err != nil {
		t.Fatal(err)
	}
	snap, err = leases.Read(st.Path())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := snap.ByMAC(dyn.String()); got.State != leases.StateBound {
		t.Errorf("dynamic bind not on disk when Bind returned: %+v", got)
	}
}
