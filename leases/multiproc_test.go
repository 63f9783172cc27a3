package leases_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/netaddr"
	"github.com/vmlane/vmlane/leases"
)

// The store's promise is that any number of processes (one per CNI call,
// the DHCP server, vmlanectl) can share one file. These tests run real OS
// processes, re-executing the test binary in a helper role (the os/exec
// helper-process pattern), because goroutines share one process and would
// not show a lock that only works within a process.

// helperRoleEnv selects a helper role in a re-executed test binary; the
// helper tests do nothing without it.
const helperRoleEnv = "VMLANE_LEASES_HELPER"

// helperCommand returns a command that runs the test binary as the helper
// test named test, in role, with env added.
func helperCommand(ctx context.Context, test, role string, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperRoleEnv+"="+role)
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// testContext ends a little before the test binary's own -timeout, so a hung
// child is killed and reported rather than the whole binary dumped.
func testContext(t *testing.T) context.Context {
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		c, cancel := context.WithDeadline(ctx, d.Add(-10*time.Second))
		t.Cleanup(cancel)
		return c
	}
	return ctx
}

// macFor derives a VM NIC's MAC from its IPv4 address, as the CNI plugin
// does, so that a duplicate IP would also show as a duplicate MAC.
func macFor(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

func gatewayOf(p netip.Prefix) netip.Addr { return p.Addr().Next() }

func envInt(t *testing.T, name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		t.Fatalf("helper: %s: %v", name, err)
	}
	return n
}

func TestMultiProcessReserveRelease(t *testing.T) {
	procs, cycles := 16, 200
	if testing.Short() {
		procs, cycles = 4, 50
	}
	res := runReserveRelease(t, "10.9.0.0/22", procs, cycles, 4, false)
	if res.exhausted != 0 {
		t.Errorf("%d reservations hit ErrExhausted on a /22 that never fills", res.exhausted)
	}
}

// TestMultiProcessReserveReleaseExhaustion runs more demand than addresses:
// 5 usable addresses (a /29 without network, gateway and broadcast) for up
// to 4 leases held by each of 8 processes. ErrExhausted is then a legal
// answer; it must not corrupt the file or leak a lease.
func TestMultiProcessReserveReleaseExhaustion(t *testing.T) {
	procs, cycles := 8, 40
	if testing.Short() {
		procs, cycles = 4, 20
	}
	res := runReserveRelease(t, "10.9.0.0/29", procs, cycles, 4, true)
	if res.exhausted == 0 {
		// Demand far above supply makes this all but certain; without
		// it the test would not have exercised what it is for.
		t.Errorf("no reservation hit ErrExhausted: the processes never contended for the 5 addresses")
	}
	t.Logf("%d of %d reservations answered ErrExhausted", res.exhausted, procs*cycles)
}

type reserveReleaseResult struct{ reserved, exhausted int }

// holding is one IP held by one container ID, from the moment Reserve
// returned to the moment Release was called, in Unix nanoseconds.
type holding struct {
	cid, ip, mac string
	from, to     int64
	child        int
}

// runReserveRelease runs procs helper processes that each make cycles
// reservations on one lease file, holding up to hold at a time, and checks
// their logs and the file afterwards.
func runReserveRelease(t *testing.T, subnet string, procs, cycles, hold int, exhaustOK bool) reserveReleaseResult {
	t.Helper()
	ctx := testContext(t)
	path := filepath.Join(t.TempDir(), "leases.json")
	type child struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
	}
	children := make([]*child, procs)
	start := time.Now()
	for i := range children {
		c := &child{cmd: helperCommand(ctx, "TestHelperProcessReserveRelease", "reserve-release",
			"VMLANE_HELPER_FILE="+path, "VMLANE_HELPER_SUBNET="+subnet, "VMLANE_HELPER_ID="+strconv.Itoa(i),
			"VMLANE_HELPER_CYCLES="+strconv.Itoa(cycles), "VMLANE_HELPER_HOLD="+strconv.Itoa(hold),
			"VMLANE_HELPER_EXHAUST_OK="+strconv.FormatBool(exhaustOK))}
		c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	failed := false
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			failed = true
			t.Errorf("child %d: %v\nstdout (last lines):\n%s\nstderr:\n%s", i, err, lastLines(c.stdout.String(), 20), c.stderr.String())
		}
	}
	t.Logf("%d processes × %d reservations: %v", procs, cycles, time.Since(start).Round(time.Millisecond))
	if failed {
		t.FailNow()
	}

	p := netip.MustParsePrefix(subnet)
	var res reserveReleaseResult
	byIP := map[string][]holding{}
	for i, c := range children {
		open := map[string]*holding{} // by container ID
		var attempts int
		sc := bufio.NewScanner(&c.stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			switch f[0] {
			case "R": // R cid ip mac unixnano
				attempts++
				res.reserved++
				from, _ := strconv.ParseInt(f[4], 10, 64)
				h := &holding{cid: f[1], ip: f[2], mac: f[3], from: from, child: i}
				if open[h.cid] != nil {
					t.Errorf("child %d reserved %s twice", i, h.cid)
				}
				open[h.cid] = h
				ip, err := netip.ParseAddr(h.ip)
				switch {
				case err != nil || !p.Contains(ip):
					t.Errorf("child %d: %s got %s, not an address of %s", i, h.cid, h.ip, p)
				case ip == gatewayOf(p) || ip == p.Addr() || ip == netaddr.LastAddr(p):
					t.Errorf("child %d: %s got %s, the gateway, network or broadcast address", i, h.cid, ip)
				case h.mac != macFor(ip):
					t.Errorf("child %d: %s got MAC %s for %s, want %s", i, h.cid, h.mac, ip, macFor(ip))
				}
			case "X": // X cid: ErrExhausted
				attempts++
				res.exhausted++
			case "F": // F cid ip unixnano, printed before Release
				h := open[f[1]]
				if h == nil || h.ip != f[2] {
					t.Errorf("child %d released %s (%s) that it did not hold", i, f[1], f[2])
					continue
				}
				h.to, _ = strconv.ParseInt(f[3], 10, 64)
				byIP[h.ip] = append(byIP[h.ip], *h)
				delete(open, h.cid)
			}
		}
		if attempts != cycles {
			t.Errorf("child %d logged %d reservations, want %d", i, attempts, cycles)
		}
		if len(open) != 0 {
			t.Errorf("child %d never released %d leases", i, len(open))
		}
	}
	for _, o := range overlaps(byIP) {
		t.Error(o)
	}

	// Nothing leaked, nothing left half-written.
	snap, err := leases.Read(path)
	if err != nil {
		t.Fatalf("the lease file does not parse after the run: %v", err)
	}
	if ls := snap.Leases(); len(ls) != 0 {
		t.Errorf("%d leases left in the file after every process released its own, first: %+v", len(ls), ls[0])
	}
	if tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".leases.json.tmp-*")); len(tmps) != 0 {
		t.Errorf("temp files left behind by writers that did not crash: %v", tmps)
	}
	return res
}

// overlaps returns the IPs that two container IDs held at overlapping
// times. The times are the wall clock, which all processes on a machine
// share; a holding's logged span starts after its write committed and ends
// before its release began, so it lies inside the real one, and an overlap
// of logged spans is a real double allocation.
func overlaps(byIP map[string][]holding) []string {
	var out []string
	for ip, hs := range byIP {
		slices.SortFunc(hs, func(a, b holding) int { return cmp.Compare(a.from, b.from) })
		var last holding
		for i, h := range hs {
			if i > 0 && h.from < last.to {
				out = append(out, fmt.Sprintf("%s was held by %s (child %d) and %s (child %d) at once: %d ns of overlap",
					ip, last.cid, last.child, h.cid, h.child, last.to-h.from))
			}
			if h.to > last.to {
				last = h
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestOverlapsFindsDoubleHolders(t *testing.T) {
	byIP := map[string][]holding{
		"10.0.0.2": {{cid: "a", from: 10, to: 20}, {cid: "b", from: 20, to: 30}, {cid: "c", from: 31, to: 40}},
		"10.0.0.3": {{cid: "d", from: 50, to: 90}, {cid: "e", from: 60, to: 70}, {cid: "f", from: 80, to: 85}},
	}
	got := overlaps(byIP)
	if len(got) != 2 || !strings.Contains(got[0], "d (child 0) and e") || !strings.Contains(got[1], "d (child 0) and f") {
		t.Errorf("overlaps = %q, want e and f each overlapping d, and nothing on 10.0.0.2", got)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestHelperProcessReserveRelease is a child of the tests above, not a test.
// It reserves in groups of hold, checking the file after every step, and
// releases each group. Its log, one line per event on stdout:
//
//	R <containerID> <ip> <mac> <unix ns>   after Reserve returned
//	X <containerID>                        Reserve answered ErrExhausted
//	F <containerID> <ip> <unix ns>         before Release is called
func TestHelperProcessReserveRelease(t *testing.T) {
	if os.Getenv(helperRoleEnv) != "reserve-release" {
		return
	}
	fail := func(format string, args ...any) {
		fmt.Printf("FAIL "+format+"\n", args...)
		os.Exit(1)
	}
	path := os.Getenv("VMLANE_HELPER_FILE")
	subnet := netip.MustParsePrefix(os.Getenv("VMLANE_HELPER_SUBNET"))
	id, cycles, hold := envInt(t, "VMLANE_HELPER_ID"), envInt(t, "VMLANE_HELPER_CYCLES"), envInt(t, "VMLANE_HELPER_HOLD")
	exhaustOK := os.Getenv("VMLANE_HELPER_EXHAUST_OK") == "true"
	s, err := leases.Open(path, subnet, gatewayOf(subnet))
	if err != nil {
		fail("open: %v", err)
	}

	// check reads the file as a runtime would (no lock) and checks that
	// every lease this process holds is there, unchanged, and that no IP
	// or MAC appears twice; gone lists container IDs that must be absent.
	check := func(held []leases.Lease, gone ...string) {
		snap, err := leases.Read(path)
		if err != nil {
			fail("read: %v", err)
		}
		ips, macs, byCID := map[netip.Addr]int{}, map[string]int{}, map[string]leases.Lease{}
		for _, l := range snap.Leases() {
			ips[l.IP]++
			if l.MAC != "" {
				macs[l.MAC]++
			}
			if _, dup := byCID[l.ContainerID]; dup {
				fail("container ID %s holds two leases", l.ContainerID)
			}
			byCID[l.ContainerID] = l
		}
		for ip, n := range ips {
			if n > 1 {
				fail("ip %s appears %d times in the file", ip, n)
			}
		}
		for mac, n := range macs {
			if n > 1 {
				fail("mac %s appears %d times in the file", mac, n)
			}
		}
		for _, h := range held {
			l, ok := byCID[h.ContainerID]
			if !ok {
				fail("my lease %s (%s) is gone from the file: a writer lost an update", h.ContainerID, h.IP)
			}
			if l.IP != h.IP || l.MAC != h.MAC {
				fail("my lease %s changed from %s/%s to %s/%s", h.ContainerID, h.IP, h.MAC, l.IP, l.MAC)
			}
			if o, ok := snap.ByIP(h.IP); !ok || o.ContainerID != h.ContainerID {
				fail("ByIP(%s) = %q, want my %s", h.IP, o.ContainerID, h.ContainerID)
			}
			if o, ok := snap.ByMAC(h.MAC); !ok || o.ContainerID != h.ContainerID {
				fail("ByMAC(%s) = %q, want my %s", h.MAC, o.ContainerID, h.ContainerID)
			}
		}
		for _, cid := range gone {
			if l, ok := byCID[cid]; ok {
				fail("released %s still holds %s", cid, l.IP)
			}
		}
	}

	for n := 0; n < cycles; {
		var held []leases.Lease
		for j := 0; j < hold && n < cycles; j++ {
			cid := fmt.Sprintf("p%02d-%05d", id, n)
			n++
			l, err := s.Reserve(leases.ReserveRequest{
				Key:    leases.Key{ContainerID: cid, IfName: "eth0"},
				MACFor: macFor,
				Pod:    leases.Pod{Namespace: "multiproc", Name: cid},
			})
			if exhaustOK && errors.Is(err, leases.ErrExhausted) {
				fmt.Printf("X %s\n", cid)
				check(held, cid)
				continue
			}
			if err != nil {
				fail("reserve %s: %v", cid, err)
			}
			fmt.Printf("R %s %s %s %d\n", cid, l.IP, l.MAC, time.Now().UnixNano())
			held = append(held, l)
			check(held)
		}
		for len(held) > 0 {
			h := held[0]
			held = held[1:]
			fmt.Printf("F %s %s %d\n", h.ContainerID, h.IP, time.Now().UnixNano())
			l, ok, err := s.Release(h.Key())
			if err != nil {
				fail("release %s: %v", h.ContainerID, err)
			}
			if !ok || l.IP != h.IP {
				fail("release %s: found=%v ip=%s, want my %s: the lease was lost or changed", h.ContainerID, ok, l.IP, h.IP)
			}
			check(held, h.ContainerID)
		}
	}
}
