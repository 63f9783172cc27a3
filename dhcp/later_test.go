package dhcp

import (
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// TestDeferredBindsLandWithinDelay: with no Flush, the binds of CNI
// reservations ACKed together are on disk LateBindDelay after the first of
// them, in one write, and not before. synctest's clock makes the window
// exact instead of a sleep that a loaded machine stretches.
func TestDeferredBindsLandWithinDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, macs, ips := reservedStore(t, 3)
		a := NewStoreAllocator(st).Defer(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		bound := func() int {
			t.Helper()
			snap, err := leases.Read(st.Path())
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, m := range macs {
				if l, _ := snap.ByMAC(m.String()); l.State == leases.StateBound {
					n++
				}
			}
			return n
		}
		for i := range macs {
			if _, err := a.Bind(macs[i], ips[i], expires, ""); err != nil {
				t.Fatal(err)
			}
			time.Sleep(LateBindDelay / 4) // the next guest's ACK
		}
		synctest.Wait()
		if n := bound(); n != 0 {
			t.Fatalf("%d binds on disk %v after the first ACK, want none before %v", n, 3*LateBindDelay/4, LateBindDelay)
		}
		time.Sleep(LateBindDelay / 4)
		synctest.Wait()
		if n := bound(); n != len(macs) {
			t.Fatalf("%d of %d binds on disk %v after the first ACK", n, len(macs), LateBindDelay)
		}
	})
}
