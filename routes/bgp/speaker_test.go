package bgp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	bgppkt "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// router is a second GoBGP standing for a fabric router, in a process of
// its own (this test binary, run by routerMain): it listens on loopback,
// takes every path, and keeps a restarting peer's routes as stale
// (graceful restart helper). Its own process, as a real router is: GoBGP
// reads a path in ListPath while its FSM marks it stale without a lock
// (Path.IsStale against Path.MarkStale), and under -race the router's
// reads of its table would be reported in this test, which is about the
// speaker.
type router struct {
	port int
	in   io.Writer
	out  *bufio.Scanner
}

const routerASN, nodeASN = 64512, 64513

// routerEnv makes the test binary the router, on the port it names.
const routerEnv = "VMLANE_TEST_BGP_ROUTER_PORT"

func TestMain(m *testing.M) {
	if port := os.Getenv(routerEnv); port != "" {
		routerMain(port)
		return
	}
	if os.Getenv(speakerEnv) != "" {
		speakerMain()
		return
	}
	os.Exit(m.Run())
}

func newRouter(t *testing.T) *router {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), routerEnv+"="+strconv.Itoa(port))
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("router's stderr:\n%s", stderr)
		}
	})
	r := &router{port: port, in: in, out: bufio.NewScanner(out)}
	if got := r.do(t, "ping"); len(got) != 1 || got[0] != "pong" {
		t.Fatalf("router: %q\n%s", got, stderr)
	}
	return r
}

// do sends the router a command and returns its answer's lines.
func (r *router) do(t *testing.T, cmd string) []string {
	t.Helper()
	if _, err := io.WriteString(r.in, cmd+"\n"); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for r.out.Scan() {
		if l := r.out.Text(); l != "." {
			lines = append(lines, l)
			continue
		}
		return lines
	}
	t.Fatalf("router stopped answering (%v) after %q", r.out.Err(), lines)
	return nil
}

// established reports whether the router's session is up.
func (r *router) established(t *testing.T) bool { return r.do(t, "established")[0] == "true" }

// table returns the router's routes as "PREFIX via NEXTHOP", with
// " (stale)" for stale ones, sorted.
func (r *router) table(t *testing.T) []string { return r.do(t, "table") }

// waitTable waits until the router's table is want.
func (r *router) waitTable(t *testing.T, what string, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = r.table(t); slices.Equal(got, want) {
			return
		}
	}
	t.Fatalf("%s: router's table %q, want %q", what, got, want)
}

// routerMain is the router process: GoBGP on 127.0.0.1:port with the
// speaker (127.0.0.1, AS nodeASN) as its passive peer, answering commands
// on stdin, each answer's lines ended by a "." line: ping, established,
// table, reset (the session), add PREFIX (a path of its own, to offer the
// speaker), delete-all.
func routerMain(port string) {
	fail := func(err error) { fmt.Fprintln(os.Stderr, err); os.Exit(1) }
	n, _ := strconv.Atoi(port)
	s := server.NewBgpServer()
	go s.Serve()
	ctx := context.Background()
	if err := s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: routerASN, RouterId: "10.255.0.1", ListenPort: int32(n), ListenAddresses: []string{"127.0.0.1"}}}); err != nil {
		fail(err)
	}
	var afis []*api.AfiSafi
	for _, f := range families {
		afis = append(afis, &api.AfiSafi{Config: &api.AfiSafiConfig{Family: f, Enabled: true}, MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}})
	}
	if err := s.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:            &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: nodeASN},
		GracefulRestart: &api.GracefulRestart{Enabled: true, RestartTime: 120},
		Transport:       &api.Transport{PassiveMode: true},
		Timers:          &api.Timers{Config: &api.TimersConfig{IdleHoldTimeAfterReset: 1}},
		AfiSafis:        afis,
	}}); err != nil {
		fail(err)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		var out []string
		switch cmd {
		case "ping":
			out = []string{"pong"}
		case "established":
			up := false
			s.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
				up = p.GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED
			})
			out = []string{strconv.FormatBool(up)}
		case "table":
			for _, f := range []bgppkt.Family{bgppkt.RF_IPv4_UC, bgppkt.RF_IPv6_UC} {
				s.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: f}, func(p bgppkt.NLRI, paths []*apiutil.Path) {
					for _, path := range paths {
						l := p.String() + " via " + nextHopOf(path)
						if path.Stale {
							l += " (stale)"
						}
						out = append(out, l)
					}
				})
			}
			slices.Sort(out)
		case "reset":
			if err := s.ResetPeer(ctx, &api.ResetPeerRequest{Address: "127.0.0.1", Communication: "maintenance"}); err != nil {
				fail(err)
			}
		case "add":
			nlri, _ := bgppkt.NewIPAddrPrefix(netip.MustParsePrefix(arg))
			nh, _ := bgppkt.NewPathAttributeNextHop(netip.MustParseAddr("127.0.0.1"))
			if _, err := s.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{{Family: bgppkt.RF_IPv4_UC, Nlri: nlri, Attrs: []bgppkt.PathAttributeInterface{bgppkt.NewPathAttributeOrigin(0), nh}}}}); err != nil {
				fail(err)
			}
		case "delete-all":
			if err := s.DeletePath(apiutil.DeletePathRequest{DeleteAll: true}); err != nil {
				fail(err)
			}
		default:
			fail(fmt.Errorf("router: unknown command %q", cmd))
		}
		for _, l := range out {
			fmt.Println(l)
		}
		fmt.Println(".")
	}
}

func nextHopOf(p *apiutil.Path) string {
	for _, a := range p.Attrs {
		switch a := a.(type) {
		case *bgppkt.PathAttributeNextHop:
			return a.Value.String()
		case *bgppkt.PathAttributeMpReachNLRI:
			return a.Nexthop.String()
		}
	}
	return "?"
}

// reports records what a speaker reports.
type reports struct {
	mu   sync.Mutex
	seen []string
}

func (r *reports) add(reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, reason+": "+msg)
}

func (r *reports) wait(t *testing.T, reason, substr string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r.mu.Lock()
		for _, s := range r.seen {
			if strings.HasPrefix(s, reason+": ") && strings.Contains(s, substr) {
				r.mu.Unlock()
				return
			}
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Fatalf("no %s report containing %q; reports: %q", reason, substr, r.seen)
}

func testConfig(r *router, peerASN uint32) Config {
	return Config{
		ASN: nodeASN, RouterID: netip.MustParseAddr("10.99.0.11"),
		Peers:    []Peer{{Addr: netip.MustParseAddr("127.0.0.1"), ASN: peerASN, Port: uint16(r.port)}},
		NextHop4: netip.MustParseAddr("10.99.0.11"), NextHop6: netip.MustParseAddr("fd99::11"),
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestSpeaker: against a router, the speaker announces the node's
// prefixes of both families over one IPv4 session with the node's next
// hops, withdraws what it no longer announces, learns nothing, and
// survives a restart without a withdrawal (graceful restart); a session
// that goes down is reported and counted.
func TestSpeaker(t *testing.T) {
	r := newRouter(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	rep := &reports{}
	sp, err := Start(context.Background(), testConfig(r, routerASN), m, quiet(), rep.add)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			sp.Stop()
		}
	}()
	pod4, pod6, vm := netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:10:244::/64"), netip.MustParsePrefix("10.244.7.9/32")
	sp.Announce([]netip.Prefix{pod4, pod6, vm})
	r.waitTable(t, "announced", "10.244.0.0/24 via 10.99.0.11", "fd00:10:244::/64 via fd99::11", "10.244.7.9/32 via 10.99.0.11")
	if got := testutil.ToFloat64(m.up.WithLabelValues("127.0.0.1")); got != 1 {
		t.Errorf("vmlane_bgp_session_up = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.announced); got != 3 {
		t.Errorf("vmlane_bgp_announced_prefixes = %v, want 3", got)
	}

	// The VM leaves: its /32 is withdrawn. Announcing the same set again
	// changes nothing.
	sp.Announce([]netip.Prefix{pod6, pod4})
	sp.Announce([]netip.Prefix{pod4, pod6})
	r.waitTable(t, "VM withdrawn", "10.244.0.0/24 via 10.99.0.11", "fd00:10:244::/64 via fd99::11")

	// The router sends a route: the speaker takes none of it.
	r.do(t, "add 192.0.2.0/24")
	time.Sleep(500 * time.Millisecond)
	n := 0
	sp.s.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: bgppkt.RF_IPv4_UC}, func(p bgppkt.NLRI, _ []*apiutil.Path) {
		if p.String() == "192.0.2.0/24" {
			n++
		}
	})
	if n != 0 {
		t.Error("the speaker took a route from its peer")
	}
	r.do(t, "delete-all")

	// The router resets the session: a flap, reported and counted.
	r.do(t, "reset")
	rep.wait(t, "VmlaneBGPSessionDown", "127.0.0.1")
	waitFor(t, "session back up", func() bool { return sp.Established(netip.MustParseAddr("127.0.0.1")) })
	if got := testutil.ToFloat64(m.flaps.WithLabelValues("127.0.0.1")); got != 1 {
		t.Errorf("vmlane_bgp_session_flaps_total = %v, want 1", got)
	}

	// vmlaned stops (or dies): the router keeps the routes, stale.
	sp.Stop()
	stopped = true
	waitFor(t, "router to see the session go", func() bool { return !r.established(t) })
	r.waitTable(t, "speaker stopped", "10.244.0.0/24 via 10.99.0.11 (stale)", "fd00:10:244::/64 via fd99::11 (stale)")
	// The next vmlaned announces the same: the routes are fresh again,
	// never withdrawn.
	sp2, err := Start(context.Background(), testConfig(r, routerASN), NewMetrics(nil), quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.Stop()
	sp2.Announce([]netip.Prefix{pod4, pod6})
	r.waitTable(t, "speaker restarted", "10.244.0.0/24 via 10.99.0.11", "fd00:10:244::/64 via fd99::11")
}

// TestSpeakerWrongASN: a peer whose ASN is not the configured one is
// refused, reported with the reason and counted, and nothing is
// announced to it.
func TestSpeakerWrongASN(t *testing.T) {
	r := newRouter(t)
	m := NewMetrics(nil)
	rep := &reports{}
	defer func(d time.Duration) { pollEvery = d }(pollEvery)
	pollEvery = 100 * time.Millisecond
	sp, err := Start(context.Background(), testConfig(r, 65000), m, quiet(), rep.add)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Stop()
	sp.Announce([]netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")})
	rep.wait(t, "VmlaneBGPPeerRefused", "127.0.0.1")
	if got := testutil.ToFloat64(m.refusals.WithLabelValues("127.0.0.1")); got < 1 {
		t.Errorf("vmlane_bgp_session_refusals_total = %v, want 1 or more", got)
	}
	if got := r.table(t); len(got) != 0 {
		t.Errorf("router learnt %q over a refused session", got)
	}
}

// TestAnnounceWithoutNextHop: a node without an IPv6 address announces
// its IPv4 prefixes only, and says so once.
func TestAnnounceWithoutNextHop(t *testing.T) {
	r := newRouter(t)
	rep := &reports{}
	c := testConfig(r, routerASN)
	c.NextHop6 = netip.Addr{}
	sp, err := Start(context.Background(), c, nil, quiet(), rep.add)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Stop()
	for range 2 {
		sp.Announce([]netip.Prefix{netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:10:244::/64")})
	}
	r.waitTable(t, "IPv4 only", "10.244.0.0/24 via 10.99.0.11")
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if len(rep.seen) != 1 || !strings.Contains(rep.seen[0], "no IPv6 next hop") {
		t.Errorf("reports %q, want one about the IPv6 next hop", rep.seen)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal(what + ": not within 20s")
}

// TestSpeakerPrefixLimit: a peer that sends more prefixes of a family than
// MaxPrefixes has its session ended, reported with the limit; the speaker
// keeps no more of them than the limit and the UPDATE that went past it
// (GoBGP counts after storing one). After prefixLimitRetry it connects
// again, and a peer that sends no more than the limit keeps its session.
func TestSpeakerPrefixLimit(t *testing.T) {
	defer func(d time.Duration) { prefixLimitRetry = d }(prefixLimitRetry)
	prefixLimitRetry = time.Second
	defer func(d time.Duration) { pollEvery = d }(pollEvery)
	pollEvery = 100 * time.Millisecond
	r := newRouter(t)
	rep := &reports{}
	cfg := testConfig(r, routerASN)
	cfg.MaxPrefixes = 3
	sp, err := Start(context.Background(), cfg, NewMetrics(nil), quiet(), rep.add)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Stop()
	peer := netip.MustParseAddr("127.0.0.1")
	waitFor(t, "session up", func() bool { return sp.Established(peer) })
	for _, p := range []string{"192.0.2.0/24", "192.0.2.1/32", "192.0.2.2/32"} {
		r.do(t, "add "+p) // an UPDATE each
	}
	time.Sleep(time.Second)
	if !sp.Established(peer) {
		t.Fatal("the session went down at the limit, not past it")
	}
	r.do(t, "add 192.0.2.3/32")
	rep.wait(t, "VmlaneBGPPrefixLimit", "sent more than 3 prefixes")
	in := 0
	sp.s.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_ADJ_IN, Name: "127.0.0.1", Family: bgppkt.RF_IPv4_UC}, func(bgppkt.NLRI, []*apiutil.Path) { in++ })
	if in > 4 {
		t.Errorf("the speaker keeps %d of the peer's prefixes, more than its limit of 3 and the one UPDATE past it", in)
	}
	// The router sends two now: the speaker connects again, and stays.
	r.do(t, "delete-all")
	r.do(t, "add 192.0.2.0/24")
	r.do(t, "add 192.0.2.1/32")
	waitFor(t, "session up again", func() bool { return sp.Established(peer) })
	time.Sleep(2 * time.Second)
	if !sp.Established(peer) {
		t.Error("the session under the limit went down again")
	}
}
