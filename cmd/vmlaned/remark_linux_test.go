package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

// TestRestartRemarksHeldReservations: a crash between a CNI reservation's
// ACK and its late bind leaves the lease reserved while the guest uses the
// address. On restart vmlaned asks by ARP: the VM that answers for its
// address with its MAC is marked bound (and a runtime in leases.Wait
// returns); a VM that is not up, and a host answering for another VM's
// address with the wrong MAC, leave their leases reserved.
func TestRestartRemarksHeldReservations(t *testing.T) {
	privtest.Require(t, "ip", "iptables")
	bin := buildBinaries(t)
	d := startStandalone(t, bin, netnstest.New(t, "node"), "10.250.32.0/24")
	vm := func(name string) (mac, ip string) {
		tap, ip := d.cniAdd(t, netnstest.New(t, "pod-"+name), "cid-"+name, "vm-"+name)
		return tap.Mac, ip
	}
	// A guest that was ACKed: its address configured, on the pod's port.
	heldMAC, heldIP := vm("held")
	port := plugin.HostVethName(leases.Key{ContainerID: "cid-held", IfName: "eth0"})
	d.node.MustRun(t, "ip", "link", "del", port)
	guest := bridgePort(t, d.node, "guest", port, heldMAC)
	guest.MustRun(t, "ip", "addr", "add", heldIP+"/24", "dev", "eth0")
	// A VM not up yet, whose address another host (another MAC, an
	// unchecked port) answers for.
	_, idleIP := vm("idle")
	other := bridgePort(t, d.node, "other", "vo-other", "02:00:00:00:00:77")
	other.MustRun(t, "ip", "addr", "add", idleIP+"/24", "dev", "eth0")

	state := func(ip string) leases.State {
		snap, err := leases.Read(d.leaseFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range snap.Leases() {
			if l.IP.String() == ip {
				return l.State
			}
		}
		t.Fatalf("no lease of %s", ip)
		return ""
	}
	if s := state(heldIP); s != leases.StateReserved {
		t.Fatalf("before the restart the held lease is %s, want reserved (the lost bind)", s)
	}
	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := leases.Wait(ctx, d.leaseFile, heldMAC)
		waited <- err
	}()

	d.kill()
	d.start(t)
	eventually(t, "the held reservation bound again", func() (bool, string) {
		s := state(heldIP)
		return s == leases.StateBound, fmt.Sprintf("lease of %s is %s", heldIP, s)
	})
	if err := <-waited; err != nil {
		t.Errorf("leases.Wait for the held VM: %v", err)
	}
	d.waitLog(t, "the re-mark", func(l string) bool {
		return strings.Contains(l, "marked bound again") && strings.Contains(l, "ip="+heldIP)
	})
	time.Sleep(3 * time.Second) // the ARP round is over
	if s := state(idleIP); s != leases.StateReserved {
		t.Errorf("lease of %s, answered for by another MAC, is %s; want reserved", idleIP, s)
	}
}
