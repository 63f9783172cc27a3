package leases_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// BenchmarkReserveReleaseProcs runs the ops of b.N spread over writer
// processes (each a CNI plugin's worth of independent writer), timed from
// the parent between "go" and the last "done", process start-up excluded.
// procs=1 goes through the same path, so the two compare.
//
// Beside the single-process floor every store benchmark pairs with, it
// measures the floor's sequence run by as many processes taking turns
// under one flock, as the store's writers do ("floor-procs-writes/s"):
// what the disk and the lock handoff give writers that decode and encode
// nothing. And it reports, over all writers, how long one held the lock
// per write ("held-µs") and how long the lock sat free between one writer
// letting go and the next taking it ("handoff-µs").
func BenchmarkReserveReleaseProcs(b *testing.B) {
	for _, procs := range []int{1, 16} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			benchProcs(b, procs)
			reportRate(b, 2)
		})
	}
}

func benchProcs(b *testing.B, procs int) {
	b.StopTimer()
	s := benchStore(b)
	procs = min(procs, b.N)
	dir := filepath.Dir(s.Path())
	writers := startWriters(b, "bench-writer", procs, b.N,
		"VMLANE_HELPER_FILE="+s.Path(), "VMLANE_HELPER_SUBNET="+s.Subnet().String())
	// The floors, each half before and half after the timed part.
	floor := pairedFloor(b, dir, b.N)
	floorProcs := runWriters(b, startWriters(b, "floor-writer", procs, b.N, "VMLANE_HELPER_DIR="+dir))
	b.ResetTimer()
	b.StartTimer()
	runWriters(b, writers)
	b.StopTimer()
	floor += pairedFloor(b, dir, b.N)
	floorProcs += runWriters(b, startWriters(b, "floor-writer", procs, b.N, "VMLANE_HELPER_DIR="+dir))
	checkBenchFile(b, s)
	reportFloor(b, 2*b.N, floor)
	b.ReportMetric(float64(2*2*b.N)/floorProcs.Seconds(), "floor-procs-writes/s")
	var holds []lockHold
	for _, w := range writers {
		holds = append(holds, parseHolds(b, w.done)...)
	}
	reportHolds(b, holds)
}

// writer is a helper process of a multi-process benchmark.
type writer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	done  string // the rest of its DONE line
}

// startWriters starts procs helper processes of role, which share ops
// between them, and waits until each says READY. They are killed when the
// benchmark ends.
func startWriters(b *testing.B, role string, procs, ops int, env ...string) []*writer {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	ws := make([]*writer, procs)
	for i := range ws {
		n := ops / procs
		if i < ops%procs {
			n++
		}
		cmd := helperCommand(ctx, "TestHelperProcessBenchWriter", role,
			append(env, "VMLANE_HELPER_ID="+strconv.Itoa(i), "VMLANE_HELPER_OPS="+strconv.Itoa(n))...)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		w := &writer{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
		w.out.Buffer(nil, 1<<30) // DONE's line holds every lock time
		ws[i] = w
		b.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	for _, w := range ws {
		w.waitFor(b, "READY")
	}
	return ws
}

// runWriters tells every writer to go and returns the time until the last
// is done.
func runWriters(b *testing.B, ws []*writer) time.Duration {
	b.Helper()
	start := time.Now()
	for _, w := range ws {
		io.WriteString(w.stdin, "GO\n")
	}
	for _, w := range ws {
		w.done = w.waitFor(b, "DONE")
	}
	return time.Since(start)
}

// waitFor reads the writer's stdout up to a line starting with want, and
// returns the rest of that line.
func (w *writer) waitFor(b *testing.B, want string) string {
	b.Helper()
	for w.out.Scan() {
		if line := w.out.Text(); strings.HasPrefix(line, want) {
			return strings.TrimPrefix(line, want)
		} else if strings.HasPrefix(line, "FAIL") {
			b.Fatalf("bench writer: %s", line)
		}
	}
	b.Fatalf("bench writer ended before %q: %v", want, w.out.Err())
	return ""
}

// lockHold is one writer's hold of the lease file's lock: taken at from,
// let go at to (wall-clock nanoseconds).
type lockHold struct{ from, to int64 }

func parseHolds(b *testing.B, line string) []lockHold {
	f := strings.Fields(line)
	if len(f)%2 != 0 {
		b.Fatalf("bench writer: an odd number of lock times: %q", line)
	}
	out := make([]lockHold, 0, len(f)/2)
	for i := 0; i < len(f); i += 2 {
		from, err1 := strconv.ParseInt(f[i], 10, 64)
		to, err2 := strconv.ParseInt(f[i+1], 10, 64)
		if err1 != nil || err2 != nil {
			b.Fatalf("bench writer: bad lock times %q %q", f[i], f[i+1])
		}
		out = append(out, lockHold{from, to})
	}
	return out
}

// reportHolds reports the mean time a writer held the lock and the mean
// time the lock sat free between one writer letting go and the next taking
// it. With many writers waiting, that gap is the handoff (the waiter's
// wake-up and its return from flock); one writer alone spends it on its
// folder fsync, which it makes after letting go.
func reportHolds(b *testing.B, holds []lockHold) {
	if len(holds) < 2 {
		return
	}
	slices.SortFunc(holds, func(x, y lockHold) int { return cmp.Compare(x.from, y.from) })
	var held, free int64
	for i, h := range holds {
		held += h.to - h.from
		if i > 0 {
			free += h.from - holds[i-1].to
		}
	}
	b.ReportMetric(float64(held)/float64(len(holds))/1e3, "held-µs")
	b.ReportMetric(float64(free)/float64(len(holds)-1)/1e3, "handoff-µs")
}

// TestHelperProcessBenchWriter is a child of BenchmarkReserveReleaseProcs,
// not a test: it prints READY, waits for a line on stdin, runs its ops and
// prints DONE. A bench-writer's op is a Reserve and a Release, and its
// DONE line carries the times it took and let go of the lock; a
// floor-writer's op is two of the floor's writes, each under the lock.
func TestHelperProcessBenchWriter(t *testing.T) {
	switch os.Getenv(helperRoleEnv) {
	case "bench-writer":
		benchWriter(t)
	case "floor-writer":
		floorWriter(t)
	}
}

func benchWriter(t *testing.T) {
	subnet := netip.MustParsePrefix(os.Getenv("VMLANE_HELPER_SUBNET"))
	s, err := leases.Open(os.Getenv("VMLANE_HELPER_FILE"), subnet, gatewayOf(subnet), leases.WithNode("node-a"))
	if err != nil {
		fmt.Printf("FAIL open: %v\n", err)
		os.Exit(1)
	}
	id, ops := envInt(t, "VMLANE_HELPER_ID"), envInt(t, "VMLANE_HELPER_OPS")
	// Each time the lock is taken and let go, as wall-clock nanoseconds,
	// the one clock all writers share.
	holds := make([]int64, 0, 4*ops+2)
	leases.SetLockHook(func(bool) { holds = append(holds, time.Now().UnixNano()) })
	readyGo()
	for i := range ops {
		if err := reserveRelease(s, benchCID(0xb0000000+uint32(id), i)); err != nil {
			fmt.Printf("FAIL %v\n", err)
			os.Exit(1)
		}
	}
	fmt.Print("DONE")
	for _, t := range holds {
		fmt.Printf(" %d", t)
	}
	fmt.Println()
}

// floorWriter writes the floor's file as a Store does, without the
// Store: the lock, the temp file, its write and fsync, the rename, the
// lock let go, the folder's fsync.
func floorWriter(t *testing.T) {
	dir := os.Getenv("VMLANE_HELPER_DIR")
	ops := envInt(t, "VMLANE_HELPER_OPS")
	data := encodeFile(t, realisticFile(benchLeases, netip.MustParsePrefix("10.244.3.0/24")))
	path := filepath.Join(dir, "floor-procs.json")
	readyGo()
	for range 2 * ops {
		if err := lockedFloorWrite(path, data); err != nil {
			fmt.Printf("FAIL %v\n", err)
			os.Exit(1)
		}
	}
	fmt.Println("DONE")
}

func lockedFloorWrite(path string, data []byte) error {
	lk, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(lk.Fd()), syscall.LOCK_EX); err != nil {
		lk.Close()
		return err
	}
	err = replaceFloor(path, data)
	lk.Close()
	if err != nil {
		return err
	}
	return syncDirFloor(filepath.Dir(path))
}

// readyGo prints READY and waits for a line on stdin.
func readyGo() {
	fmt.Println("READY")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		os.Exit(1)
	}
}
