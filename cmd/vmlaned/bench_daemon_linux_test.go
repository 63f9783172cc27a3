package main

// The benchmarks' vmlaned: started in a node's netns, its log read for
// the times of its messages, its CPU, memory, netlink drops and metrics,
// and the tables the results are printed in.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/bench/benchns"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// goalTable is a benchmark's table for people: a row a metric, with its
// value, its goal and whether the goal was met.
type goalTable struct {
	out strings.Builder
	tw  *tabwriter.Writer
}

func newGoalTable() *goalTable {
	g := &goalTable{}
	g.tw = tabwriter.NewWriter(&g.out, 0, 0, 2, ' ', 0)
	return g
}

// row adds a metric; ok, when given, says whether it met its goal.
func (g *goalTable) row(metric, value, goal string, ok ...bool) {
	result := ""
	if len(ok) > 0 {
		result = "met"
		if !ok[0] {
			result = "MISSED"
		}
	}
	fmt.Fprintf(g.tw, "%s\t%s\t%s\t%s\n", metric, value, goal, result)
}

func (g *goalTable) String() string {
	g.tw.Flush()
	return g.out.String()
}

func dur(d time.Duration) string { return d.Round(time.Millisecond).String() }

// loadAvg is the 1-minute load average: the numbers mean little when other
// work shares the two cores.
func loadAvg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func ms1(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// benchDaemon is vmlaned running in a node's netns.
type benchDaemon struct {
	cmd    *exec.Cmd
	log    *daemonLog
	start  time.Time
	exited chan struct{}
}

// pid is vmlaned's: `ip netns exec` execs in place, which pid checks.
func (d *benchDaemon) pid() int { return d.cmd.Process.Pid }

func (c *cluster) startBenchDaemon(n *netnstest.NS, extra ...string) *benchDaemon {
	c.tb.Helper()
	dir := c.tb.TempDir()
	args := append([]string{"--kubeconfig", c.cp.Kubeconfig, "--node-name", "a",
		"--cni-conf-dir", filepath.Join(dir, "net.d"), "--lease-file", filepath.Join(dir, "leases.json"),
		"--resync-period", "30s", "--health-addr", "127.0.0.1:19465", "--metrics-addr", "127.0.0.1:19464"}, extra...)
	cmd := n.Command(filepath.Join(c.bin, "vmlaned"), args...)
	d := &benchDaemon{cmd: cmd, log: &daemonLog{}, exited: make(chan struct{})}
	cmd.Stderr = d.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d.start = time.Now()
	if err := cmd.Start(); err != nil {
		c.tb.Fatal(err)
	}
	go func() { cmd.Wait(); close(d.exited) }()
	c.tb.Cleanup(func() {
		cmd.Process.Kill()
		<-d.exited
		if c.tb.Failed() {
			c.tb.Logf("vmlaned log:\n%s", d.log.String())
		}
	})
	return d
}

// daemonLog collects vmlaned's stderr (slog text) and remembers the time=
// of the first line with each message.
type daemonLog struct {
	mu      sync.Mutex
	all     strings.Builder
	partial string
	first   map[string]time.Time
	lines   map[string]string // the first line with each message
}

func (l *daemonLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	lines := strings.Split(l.partial+string(p), "\n")
	l.partial = lines[len(lines)-1]
	for _, line := range lines[:len(lines)-1] {
		ts, rest, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		_, msg, ok := strings.Cut(rest, "msg=")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil {
			continue
		}
		if q, err := strconv.QuotedPrefix(msg); err == nil {
			msg, _ = strconv.Unquote(q) // slog quotes messages with spaces
		} else {
			msg, _, _ = strings.Cut(msg, " ")
		}
		if l.first == nil {
			l.first, l.lines = map[string]time.Time{}, map[string]string{}
		}
		if _, seen := l.first[msg]; !seen {
			l.first[msg], l.lines[msg] = t, line
		}
	}
	return len(p), nil
}

func (l *daemonLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

// attr returns the value of key in the first line logging msg, "" when
// there is none.
func (l *daemonLog) attr(msg, key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range strings.Fields(l.lines[msg]) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// wait returns the time= of the first line logging msg.
func (l *daemonLog) wait(tb testing.TB, d *benchDaemon, msg string, timeout time.Duration) time.Time {
	tb.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		l.mu.Lock()
		t, ok := l.first[msg]
		l.mu.Unlock()
		select {
		case <-d.exited:
			tb.Fatalf("vmlaned exited before logging %q:\n%s", msg, l.String())
		default:
		}
		if ok {
			return t
		}
		if time.Now().After(deadline) {
			tb.Fatalf("vmlaned did not log %q within %v:\n%s", msg, timeout, l.String())
		}
	}
}

// percentile is the nearest-rank percentile p of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}

// procMem returns VmRSS and VmHWM of pid in MiB, after checking that pid
// is vmlaned.
func procMem(tb testing.TB, pid int) (rss, hwm float64) {
	tb.Helper()
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err != nil || strings.TrimSpace(string(comm)) != "vmlaned" {
		tb.Fatalf("pid %d is %q, not vmlaned: %v", pid, comm, err)
	}
	rss, hwm, err := benchns.ProcMem(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return rss, hwm
}

type cpuTimes struct{ user, sys time.Duration }

// procCPU is the CPU time pid has used, all threads.
func procCPU(tb testing.TB, pid int) cpuTimes {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after "(comm)": state is field 3 of proc(5), utime 14, stime 15.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	tick := func(s string) time.Duration {
		n, _ := strconv.Atoi(s)
		return time.Duration(n) * time.Second / 100 // USER_HZ
	}
	return cpuTimes{user: tick(f[11]), sys: tick(f[12])}
}

// netlinkDrops sums the Drops of pid's netlink sockets subscribed to IPv4
// route events (the route-delete watch), as /proc/net/netlink in its netns
// shows them.
func netlinkDrops(tb testing.TB, n *netnstest.NS, pid int) string {
	tb.Helper()
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	out := n.MustRun(tb, "cat", "/proc/net/netlink")
	socks, drops := 0, 0
	for _, line := range strings.Split(out, "\n")[1:] {
		// sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode
		f := strings.Fields(line)
		if len(f) < 10 || f[1] != "0" || !inodes[f[9]] {
			continue
		}
		groups, _ := strconv.ParseUint(f[3], 16, 32)
		if groups&(1<<(unix.RTNLGRP_IPV4_ROUTE-1)) == 0 {
			continue
		}
		socks++
		d, _ := strconv.Atoi(f[8])
		drops += d
	}
	if socks == 0 {
		return "no route-event socket"
	}
	return strconv.Itoa(drops)
}

// scrape reads vmlaned's /metrics from inside n and sums each metric over
// its labels.
func scrape(tb testing.TB, n *netnstest.NS) map[string]float64 {
	tb.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = n.Do(func() error {
				var d net.Dialer
				conn, err = d.DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://127.0.0.1:19464/metrics")
	if err != nil {
		tb.Fatalf("scraping vmlaned: %v", err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		name, _, _ := strings.Cut(line[:i], "{")
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[name] += v
		}
	}
	return m
}
