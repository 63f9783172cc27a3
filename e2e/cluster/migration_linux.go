package cluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// What the suites' live-migration tests share: running one migration over
// QMP, timing its switch in the kernels (MigrationClock), reading each
// vantage's pings across it (PingLoss) and the report (MigrationTable).

// MigrationCount is how many migrations a test runs: VMLANE_MIGRATIONS,
// or def when it is not set.
func MigrationCount(tb testing.TB, def int) int {
	tb.Helper()
	v := os.Getenv("VMLANE_MIGRATIONS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("invalid VMLANE_MIGRATIONS %q: want a count of 1 or more", v)
	}
	return n
}

// MigrationStatus is what QEMU reports of a finished migration.
type MigrationStatus struct {
	// Total is the migration's whole time as the caller saw it; Downtime
	// the guest's pause as the source QEMU measured it (0 when it reports
	// none: seen now and then with QEMU 7.2), which ends when the target
	// has told the source, over the return path, that it is done.
	Total, Downtime time.Duration
	// Ended is when the caller saw it completed.
	Ended time.Time
	// Pause is the guest's whole pause, from the source QEMU's STOP event
	// to the target QEMU's RESUME (zero when the target was not watched),
	// and Resumed when the target resumed it.
	Pause   time.Duration
	Resumed time.Time
}

// Migrate has the source QEMU behind q migrate its guest to uri (QEMU's
// form, such as unix:/path) and waits, up to 3 minutes, until it reports
// the migration completed. With target, the target QEMU's monitor, it
// also waits for the target to resume the guest, and reports the pause.
//
// Both QEMUs run with the return path on, as libvirt (and so KubeVirt)
// runs every migration it does not tunnel: the source then completes
// only when the target has said it is done, once it has loaded the state.
// A target started without -S, as the tests start it, says so after it
// resumed the guest, and QEMU's downtime is then the guest's whole pause
// as the source saw it. (libvirt starts its target paused and resumes it
// after the source completed: there the guest's pause is QEMU's downtime
// and libvirt's finishing step.) Without the return path, the source
// completes when it has written the last of the state, and the downtime
// leaves out the target's reading of it (30–80 ms here).
func Migrate(q, target *QMP, uri string) (MigrationStatus, error) {
	var st MigrationStatus
	returnPath := map[string]any{"capabilities": []map[string]any{{"capability": "return-path", "state": true}}}
	for _, m := range []*QMP{target, q} {
		if m == nil {
			continue
		}
		if _, err := m.Execute("migrate-set-capabilities", returnPath); err != nil {
			return st, err
		}
	}
	if _, err := q.Execute("migrate-set-parameters", map[string]any{"max-bandwidth": 1 << 30}); err != nil {
		return st, err
	}
	start := time.Now()
	if _, err := q.Execute("migrate", map[string]any{"uri": uri}); err != nil {
		return st, err
	}
	var status struct {
		Status    string `json:"status"`
		Downtime  int64  `json:"downtime"`
		ErrorDesc string `json:"error-desc"`
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		res, err := q.Execute("query-migrate", nil)
		if err != nil {
			return st, err
		}
		if err := json.Unmarshal(res, &status); err != nil {
			return st, fmt.Errorf("query-migrate: %w", err)
		}
		if status.Status == "completed" || status.Status == "failed" || time.Now().After(deadline) {
			break
		}
	}
	st.Ended = time.Now()
	st.Total, st.Downtime = st.Ended.Sub(start), time.Duration(status.Downtime)*time.Millisecond
	if status.Status != "completed" {
		return st, fmt.Errorf("migration %s after %v: %s", status.Status, st.Total.Round(time.Millisecond), status.ErrorDesc)
	}
	if target != nil {
		resumed, err := target.WaitEvent("RESUME", 30*time.Second)
		if err != nil {
			return st, fmt.Errorf("the target QEMU: %w", err)
		}
		st.Resumed = resumed.At
		if stopped, ok := q.Event("STOP"); ok {
			st.Pause = resumed.At.Sub(stopped.At)
		}
	}
	return st, nil
}

// ClockNode is a kernel whose routes to a migrating VM a MigrationClock
// times: Name for the report, NS its network namespace's path, and Moved,
// which says whether the kernel's route to the VM's address addr
// (RouteGet's first) goes the new way.
type ClockNode struct {
	Name  string
	NS    string
	Moved func(addr netip.Addr, r netlink.Route) bool
}

// MigrationClock times a live migration's switch in the kernels: when the
// target's bridge first learns the guest's MAC (the kernel's new-neighbour
// notice, what wakes the target's vmlaned), and when each kernel first
// routes each of the VM's addresses the new way after a change of its
// host route (/32 or /128, added, replaced or deleted). It listens from
// its start; Stop ends it.
type MigrationClock struct {
	mu         sync.Mutex
	firstFrame time.Time
	routed     map[string]time.Time // "node v4" -> when
	stops      []chan struct{}
}

// StartMigrationClock listens on the bridges in the namespace bridgeNS
// for mac, and in each of nodes for the routes to addrs, from now on.
func StartMigrationClock(tb testing.TB, bridgeNS, mac string, addrs []netip.Addr, nodes []ClockNode) *MigrationClock {
	tb.Helper()
	m := &MigrationClock{routed: map[string]time.Time{}}
	open := func(path string) netns.NsHandle {
		h, err := netns.GetFromPath(path)
		if err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		tb.Cleanup(func() { h.Close() })
		return h
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		tb.Fatalf("the guest's MAC %q: %v", mac, err)
	}
	th := open(bridgeNS)
	nch, ndone := make(chan netlink.NeighUpdate, 256), make(chan struct{})
	if err := netlink.NeighSubscribeWithOptions(nch, ndone, netlink.NeighSubscribeOptions{Namespace: &th}); err != nil {
		tb.Fatalf("watching the bridge in %s: %v", bridgeNS, err)
	}
	m.stops = append(m.stops, ndone)
	go func() {
		for u := range nch {
			if u.Type == unix.RTM_NEWNEIGH && u.Family == unix.AF_BRIDGE && u.HardwareAddr.String() == hw.String() {
				now := time.Now()
				m.mu.Lock()
				if m.firstFrame.IsZero() {
					m.firstFrame = now
				}
				m.mu.Unlock()
			}
		}
	}()
	for _, n := range nodes {
		h := open(n.NS)
		nh, err := netlink.NewHandleAt(h)
		if err != nil {
			tb.Fatalf("%s: %v", n.Name, err)
		}
		tb.Cleanup(nh.Close)
		ch, done := make(chan netlink.RouteUpdate, 256), make(chan struct{})
		if err := netlink.RouteSubscribeWithOptions(ch, done, netlink.RouteSubscribeOptions{Namespace: &h}); err != nil {
			tb.Fatalf("%s: watching routes: %v", n.Name, err)
		}
		m.stops = append(m.stops, done)
		go func() {
			for u := range ch {
				if u.Dst == nil {
					continue
				}
				addr, ok := netip.AddrFromSlice(u.Dst.IP)
				if ones, bits := u.Dst.Mask.Size(); !ok || ones != bits || !slices.Contains(addrs, addr.Unmap()) {
					continue
				}
				addr = addr.Unmap()
				rs, err := nh.RouteGet(addr.AsSlice())
				if err != nil || len(rs) == 0 || !n.Moved(addr, rs[0]) {
					continue
				}
				now, key := time.Now(), n.Name+" "+Family(addr)
				m.mu.Lock()
				if _, ok := m.routed[key]; !ok {
					m.routed[key] = now
				}
				m.mu.Unlock()
			}
		}()
	}
	return m
}

// Family is "v4" or "v6", as the tables name an address's family.
func Family(a netip.Addr) string {
	if a.Is4() {
		return "v4"
	}
	return "v6"
}

// Stop ends the listening and reports the switch: when the target's
// bridge first heard the guest, and each kernel's new route after that
// frame, by "NODE v4" and "NODE v6" (ok false when the bridge never
// reported the guest).
func (m *MigrationClock) Stop() (first time.Time, routed map[string]time.Duration, ok bool) {
	for _, d := range m.stops {
		close(d)
	}
	m.stops = nil
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.firstFrame.IsZero() {
		return time.Time{}, nil, false
	}
	routed = map[string]time.Duration{}
	for k, at := range m.routed {
		routed[k] = at.Sub(m.firstFrame)
	}
	return m.firstFrame, routed, true
}

// MigrationRun is what one migration measured.
type MigrationRun struct {
	N        int
	From, To string
	// Pod is the target's pod.
	Pod string
	MigrationStatus
	// FirstFrame is when the target's bridge first heard the guest, after
	// the target QEMU resumed it (after QEMU's end was seen when the
	// target was not watched; negative: before); SwitchAfter the slowest
	// kernel's new route after that frame, and Routed each kernel's, by
	// "NODE v4" and "NODE v6"; Heard false when the bridge never reported
	// the guest.
	FirstFrame, SwitchAfter time.Duration
	Routed                  map[string]time.Duration
	Heard                   bool
	// Loss is each vantage's longest run of lost pings, in time, by
	// vantage ("node-a v4").
	Loss map[string]time.Duration
}

// Clocked records what clock measured of r's switch; call it after the
// migration ended (r.Ended set).
func (r *MigrationRun) Clocked(clock *MigrationClock) {
	if first, routed, ok := clock.Stop(); ok {
		r.Heard, r.FirstFrame, r.Routed = true, first.Sub(r.Ended), routed
		if !r.Resumed.IsZero() {
			r.FirstFrame = first.Sub(r.Resumed)
		}
		for _, d := range routed {
			r.SwitchAfter = max(r.SwitchAfter, d)
		}
	}
}

// frameAfter names what FirstFrame counts from.
func (r MigrationRun) frameAfter() string {
	if r.Resumed.IsZero() {
		return "QEMU's end"
	}
	return "the guest's RESUME"
}

// Worst is the longest loss of any vantage.
func (r MigrationRun) Worst() time.Duration {
	var w time.Duration
	for _, l := range r.Loss {
		w = max(w, l)
	}
	return w
}

func (r MigrationRun) String() string {
	var ls []string
	for _, k := range slices.Sorted(maps.Keys(r.Loss)) {
		ls = append(ls, fmt.Sprintf("%s %v", k, r.Loss[k]))
	}
	sw := "the target's bridge never reported the guest"
	if r.Heard {
		var rs []string
		for _, k := range slices.Sorted(maps.Keys(r.Routed)) {
			rs = append(rs, fmt.Sprintf("%s %v", k, r.Routed[k].Round(time.Millisecond)))
		}
		sw = fmt.Sprintf("first frame %v after %s, then the routes: %s", r.FirstFrame.Round(time.Millisecond), r.frameAfter(), strings.Join(rs, ", "))
	}
	pause := ""
	if r.Pause > 0 {
		pause = fmt.Sprintf(", the guest paused %v (resumed %v after QEMU's end)", r.Pause.Round(time.Millisecond), r.Resumed.Sub(r.Ended).Round(time.Millisecond))
	}
	return fmt.Sprintf("%s → %s: QEMU downtime %v (total %v)%s; %s; lost: %s",
		r.From, r.To, r.Downtime, r.Total.Round(time.Millisecond), pause, sw, strings.Join(ls, ", "))
}

// MigrationTable is the runs as a table, one column per vantage of keys,
// and the median and worst over the runs of two differences: each run's
// worst loss beyond QEMU's downtime (the goal; a run whose QEMU reported
// none is left out), and beyond the guest's whole pause.
func MigrationTable(runs []MigrationRun, keys []string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "| run | from → to | QEMU downtime | guest's pause (STOP → RESUME) | first frame after the guest's RESUME | slowest route after it | loss %s | worst beyond downtime | worst beyond the pause |\n", strings.Join(keys, " | loss "))
	fmt.Fprintf(&sb, "|%s\n", strings.Repeat(" --- |", 8+len(keys)))
	var diffs, paused []time.Duration
	for _, r := range runs {
		ff, sw := "never heard", "-"
		if r.Heard {
			ff, sw = ms(r.FirstFrame), ms(r.SwitchAfter)
			if r.Resumed.IsZero() {
				ff += " (after " + r.frameAfter() + ")"
			}
		}
		var ls []string
		for _, k := range keys {
			ls = append(ls, ms(r.Loss[k]))
		}
		d := "n/a"
		if r.Downtime > 0 {
			diffs = append(diffs, r.Worst()-r.Downtime)
			d = fmt.Sprintf("%+d ms", (r.Worst() - r.Downtime).Milliseconds())
		}
		p, dp := "-", "n/a"
		if r.Pause > 0 {
			p, dp = ms(r.Pause), fmt.Sprintf("%+d ms", (r.Worst()-r.Pause).Milliseconds())
			paused = append(paused, r.Worst()-r.Pause)
		}
		fmt.Fprintf(&sb, "| %d | %s → %s | %s | %s | %s | %s | %s | %s | %s |\n", r.N, r.From, r.To, ms(r.Downtime), p, ff, sw, strings.Join(ls, " | "), d, dp)
	}
	stat := func(what string, ds []time.Duration) {
		if len(ds) == 0 {
			return
		}
		slices.Sort(ds)
		fmt.Fprintf(&sb, "%s over %d runs: median %+d ms, worst %+d ms\n", what, len(ds), ds[len(ds)/2].Milliseconds(), ds[len(ds)-1].Milliseconds())
	}
	stat("migration loss beyond QEMU's downtime (the goal: at most +20 ms)", diffs)
	stat("migration loss beyond the guest's whole pause (the source's STOP to the target's RESUME)", paused)
	return sb.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

// Pinged records what a vantage's busybox ping output across the
// migration, count pings, lost at the longest (Loss[vantage]), and says
// whether the pings came back: an error names what was wrong when fewer
// than nine in ten were sent, 300 in a row (3 s) went unanswered, or
// none of the last ones (AnsweredAtEnd) was answered. A blackhole loses
// every ping until the claim moves, a route left with the paused source
// or a neighbour entry no one answers for every one after it: 3 s is far
// above the goal and far below either.
func (r *MigrationRun) Pinged(vantage, out string, count int) error {
	sent, recv, gap := PingLoss(out, count)
	r.Loss[vantage] = time.Duration(gap) * MigrationPingInterval
	if sent < count*9/10 || gap > 300 || !AnsweredAtEnd(out, sent) {
		return fmt.Errorf("ping from %s across it: %d sent, %d answered, the longest gap %d: want the pings to go on\n%s\naround the gap:\n%s",
			vantage, sent, recv, gap, LastLines(out, 5), AroundGap(out, sent))
	}
	return nil
}

// RouteTo is the kernel's route to addr in ns (RouteGet's first), zero
// when there is none.
func RouteTo(tb testing.TB, ns *netnstest.NS, addr netip.Addr) netlink.Route {
	tb.Helper()
	var rs []netlink.Route
	err := ns.Do(func() (err error) {
		rs, err = netlink.RouteGet(addr.AsSlice())
		return err
	})
	if err != nil || len(rs) == 0 {
		tb.Logf("%s: route to %s: %v", ns.Name, addr, err)
		return netlink.Route{}
	}
	return rs[0]
}

// MigrationPingInterval is how often a vantage pings across a migration.
const MigrationPingInterval = 10 * time.Millisecond

// PingArgs is busybox ping's arguments for count pings of dst, one every
// MigrationPingInterval (the form PingLoss reads).
func PingArgs(dst netip.Addr, count int) []string {
	return []string{"ping", "-c", strconv.Itoa(count), "-i", "0.01", "-W", "2", dst.String()}
}

var pingSeq = regexp.MustCompile(`seq=(\d+) `)

// answered is the seqs of busybox ping's replies in out.
func answered(out string) map[int]bool {
	got := map[int]bool{}
	for _, m := range pingSeq.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		got[n] = true
	}
	return got
}

// PingLoss reads busybox ping's output (seqs from 0): echo requests sent
// (from its summary, or count), replies, and the longest run of requests
// in a row without a reply.
func PingLoss(out string, count int) (sent, recv, gap int) {
	sent = count
	if m := regexp.MustCompile(`(\d+) packets transmitted`).FindStringSubmatch(out); m != nil {
		sent, _ = strconv.Atoi(m[1])
	}
	got := answered(out)
	recv = len(got)
	run := 0
	for i := 0; i < sent; i++ {
		if got[i] {
			run = 0
			continue
		}
		run++
		gap = max(gap, run)
	}
	return sent, recv, gap
}

// AnsweredAtEnd reports whether any of the pings of the last 3 s to 2 s
// before the end of sent, one every MigrationPingInterval, was answered:
// the traffic came back (the last 2 s are left out, still in flight).
func AnsweredAtEnd(out string, sent int) bool {
	got := answered(out)
	for i := sent - 300; i < sent-200; i++ {
		if got[i] {
			return true
		}
	}
	return false
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// GapStart is the first seq of the longest run of lost pings.
func GapStart(out string, sent int) int {
	got := answered(out)
	best, bestStart, run := 0, -1, 0
	for i := 0; i < sent; i++ {
		if got[i] {
			run = 0
			continue
		}
		run++
		if run > best {
			best, bestStart = run, i-run+1
		}
	}
	return bestStart
}

// AroundGap is the ping lines just before and after the longest gap.
func AroundGap(out string, sent int) string {
	start := GapStart(out, sent)
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		m := pingSeq.FindStringSubmatch(l)
		if m == nil {
			if !strings.Contains(l, "seq=") && strings.TrimSpace(l) != "" {
				keep = append(keep, l)
			}
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if n >= start-3 && n <= start+3 || n > start && len(keep) < 12 {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
