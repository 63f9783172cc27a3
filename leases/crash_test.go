//go:build unix

package leases_test

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// TestKilledWritersLoseNothing kills writers with SIGKILL at random moments,
// over and over, and checks what a crash may and may not leave behind:
//
//   - the file parses (or does not exist yet): the rename is atomic;
//   - every reservation a writer acknowledged is in the file with the IP it
//     was told: a write is on disk before Reserve returns;
//   - a killed writer leaves at most its one temp file (only the lock holder
//     writes one), temp files break neither readers nor the next writer, and
//     the lock dies with its holder;
//   - no IP or MAC appears twice.
func TestKilledWritersLoseNothing(t *testing.T) {
	rounds, writers := 30, 4
	if testing.Short() {
		rounds = 8
	}
	ctx := testContext(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "leases.json")
	// Large enough that the writers never exhaust it in 30 rounds.
	subnet := netip.MustParsePrefix("10.12.0.0/18")
	parent, err := leases.Open(path, subnet, gatewayOf(subnet))
	if err != nil {
		t.Fatal(err)
	}
	tempFiles := func() []string {
		m, err := filepath.Glob(filepath.Join(dir, ".leases.json.tmp-*"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	acked := map[string]netip.Addr{} // container ID → IP, for every printed success
	var delays []time.Duration
	prevTemps := 0
	for round := range rounds {
		type child struct {
			cmd   *exec.Cmd
			lines []string
			done  chan struct{}
		}
		ready := make(chan int, writers)
		children := make([]*child, writers)
		// One process group, killed with one kill(2): killed one by one,
		// the lock holder's death lets the next writer take the lock and
		// start a temp file before its own SIGKILL arrives.
		pgid := 0
		for w := range children {
			cmd := helperCommand(ctx, "TestHelperProcessCrashWriter", "crash-writer",
				"VMLANE_HELPER_FILE="+path, "VMLANE_HELPER_SUBNET="+subnet.String(),
				fmt.Sprintf("VMLANE_HELPER_PREFIX=r%02d-w%d", round, w))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if pgid == 0 {
				pgid = cmd.Process.Pid
			}
			c := &child{cmd: cmd, done: make(chan struct{})}
			children[w] = c
			go func() {
				defer close(c.done)
				sentReady := false
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					line := sc.Text()
					if line == "READY" && !sentReady {
						ready <- w
						sentReady = true
						continue
					}
					c.lines = append(c.lines, line)
				}
				if !sentReady {
					ready <- -1 - w // ended before it was ready
				}
			}()
		}
		for range writers {
			select {
			case w := <-ready:
				if w < 0 {
					c := children[-1-w]
					<-c.done
					t.Fatalf("round %d: writer %d ended before it was ready: %v\n%s", round, -1-w, c.cmd.Wait(), strings.Join(c.lines, "\n"))
				}
			case <-ctx.Done():
				t.Fatalf("round %d: writers never became ready: %v", round, ctx.Err())
			case <-time.After(time.Minute):
				t.Fatalf("round %d: writers not ready after a minute", round)
			}
		}
		d := time.Duration(5+rand.IntN(46)) * time.Millisecond
		delays = append(delays, d)
		time.Sleep(d)
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
			t.Fatalf("round %d: killing the writers: %v", round, err)
		}
		for w, c := range children {
			<-c.done
			err := c.cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("round %d writer %d ended by itself (%v), not by SIGKILL:\n%s", round, w, err, lastLines(strings.Join(c.lines, "\n"), 10))
			}
			for _, line := range c.lines {
				f := strings.Fields(line)
				if len(f) != 3 || f[0] != "OK" {
					t.Fatalf("round %d writer %d: unexpected line %q", round, w, line)
				}
				acked[f[1]] = netip.MustParseAddr(f[2])
			}
		}

		before := tempFiles()
		// Only the lock holder writes a temp file, so one round of kills
		// leaves at most one more.
		if len(before) > prevTemps+1 {
			t.Fatalf("round %d: %d temp files, %d before the kill: a round of kills left more than the one a lock holder can leave: %v", round, len(before), prevTemps, before)
		}
		checkAcked := func(when string) *leases.Snapshot {
			snap, err := leases.Read(path)
			if errors.Is(err, fs.ErrNotExist) && len(acked) == 0 {
				return nil
			}
			if err != nil {
				t.Fatalf("round %d, %s: the lease file does not parse: %v", round, when, err)
			}
			byCID := map[string]leases.Lease{}
			for _, l := range snap.Leases() {
				byCID[l.ContainerID] = l
			}
			for cid, ip := range acked {
				l, ok := byCID[cid]
				if !ok {
					t.Fatalf("round %d, %s: acknowledged reservation %s (%s) is not in the file", round, when, cid, ip)
				}
				if l.IP != ip {
					t.Fatalf("round %d, %s: acknowledged reservation %s has %s in the file, the writer was told %s", round, when, cid, l.IP, ip)
				}
			}
			return snap
		}
		checkAcked("after the kill")

		// The next writer must get the lock (its holder is dead) and write
		// beside whatever temp files are left.
		cid := fmt.Sprintf("parent-%02d", round)
		type result struct {
			l   leases.Lease
			err error
		}
		resc := make(chan result, 1)
		go func() {
			l, err := parent.Reserve(leases.ReserveRequest{Key: leases.Key{ContainerID: cid, IfName: "eth0"}, MACFor: macFor})
			resc <- result{l, err}
		}()
		select {
		case r := <-resc:
			if r.err != nil {
				t.Fatalf("round %d: writing after the kill: %v", round, r.err)
			}
			acked[cid] = r.l.IP
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: a write after the kill did not finish in 30s: is the lock still held by a dead writer?", round)
		}
		checkAcked("after the next write")
		if _, ok, err := parent.Release(leases.Key{ContainerID: cid, IfName: "eth0"}); !ok || err != nil {
			t.Fatalf("round %d: releasing %s: found=%v, %v", round, cid, ok, err)
		}
		delete(acked, cid)
		// Successful writes leave no temp file of their own (cleaning up
		// a dead writer's would be fine).
		after := tempFiles()
		if len(after) > len(before) {
			t.Fatalf("round %d: successful writes added temp files: %v, before %v", round, after, before)
		}
		prevTemps = len(after)
	}

	snap, err := leases.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	ips, macs := map[netip.Addr]string{}, map[string]string{}
	for _, l := range snap.Leases() {
		if o, dup := ips[l.IP]; dup {
			t.Errorf("%s is held by %s and %s", l.IP, o, l.ContainerID)
		}
		ips[l.IP] = l.ContainerID
		if o, dup := macs[l.MAC]; dup {
			t.Errorf("%s is held by %s and %s", l.MAC, o, l.ContainerID)
		}
		macs[l.MAC] = l.ContainerID
	}
	if len(acked) == 0 {
		t.Errorf("no writer acknowledged a reservation in %d rounds: the test did not exercise anything", rounds)
	}
	t.Logf("%d rounds of %d writers killed after %v: %d reservations acknowledged, %d in the file, %d temp files left by killed writers",
		rounds, writers, delays, len(acked), len(snap.Leases()), len(tempFiles()))
}

// TestHelperProcessCrashWriter is a child of TestKilledWritersLoseNothing,
// not a test. It prints READY, then reserves until it is killed, printing
// "OK <containerID> <ip>" after each Reserve has returned, in one write.
func TestHelperProcessCrashWriter(t *testing.T) {
	if os.Getenv(helperRoleEnv) != "crash-writer" {
		return
	}
	path := os.Getenv("VMLANE_HELPER_FILE")
	subnet := netip.MustParsePrefix(os.Getenv("VMLANE_HELPER_SUBNET"))
	prefix := os.Getenv("VMLANE_HELPER_PREFIX")
	s, err := leases.Open(path, subnet, gatewayOf(subnet))
	if err != nil {
		fmt.Printf("ERR open: %v\n", err)
		os.Exit(1)
	}
	os.Stdout.Write([]byte("READY\n"))
	for n := 0; ; n++ {
		cid := prefix + "-" + strconv.Itoa(n)
		l, err := s.Reserve(leases.ReserveRequest{Key: leases.Key{ContainerID: cid, IfName: "eth0"}, MACFor: macFor})
		if err != nil {
			fmt.Printf("ERR reserve %s: %v\n", cid, err)
			os.Exit(1)
		}
		// One write of a whole line: a pipe write of at most PIPE_BUF
		// bytes is atomic, so a kill cannot leave half a line.
		os.Stdout.Write([]byte("OK " + cid + " " + l.IP.String() + "\n"))
	}
}
