package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vmlane/vmlane/internal/bench/benchns"
)

// Link names: port0 is the bridge port in the server namespace, load0 its
// veth peer in the load namespace, where the clients are.
const (
	portName = "port0"
	loadName = "load0"
)

// probeTimeout bounds each reply while a freshly started server is probed
// for readiness; startTimeout bounds the whole wait.
const (
	probeTimeout = 250 * time.Millisecond
	startTimeout = 15 * time.Second
)

// bench is a run's network and clients: the server namespace (bridge,
// port) where one server at a time runs, and the load namespace.
type bench struct {
	cfg       config
	plan      plan
	tmp       string
	log       io.Writer
	srv, load *benchns.NS
	gen       *loadGen
	cur       *server // the server running now, if any
	shown     map[string]bool
}

// setup makes both namespaces and the veth, has vmlaned create the bridge
// (standalone vmlaned makes vmlane0 with the gateway address and MTU, and
// leaves it when it stops), joins the port to it, and opens the clients'
// socket.
func (b *bench) setup(ctx context.Context, nss *benchns.Run) error {
	var err error
	if b.srv, err = nss.Create(ctx, "srv"); err != nil {
		return err
	}
	if b.load, err = nss.Create(ctx, "load"); err != nil {
		return err
	}
	if err := b.srv.IP(ctx, "link", "add", portName, "type", "veth", "peer", "name", loadName, "netns", b.load.Name); err != nil {
		return err
	}
	// No IPv6 link-local address on either end: no DAD or router
	// solicitations on the wire while timing.
	for _, s := range []struct {
		ns   *benchns.NS
		link string
	}{{b.srv, portName}, {b.load, loadName}} {
		if err := s.ns.IP(ctx, "link", "set", s.link, "addrgenmode", "none", "up"); err != nil {
			return err
		}
	}
	dir := filepath.Join(b.tmp, "bringup")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if b.cur, err = startServer("vmlaned", b.srv.Command(b.cfg.vmlaned, vmlanedArgs(dir, b.plan)...)); err != nil {
		return err
	}
	want := netip.PrefixFrom(b.plan.gateway, b.plan.subnet.Bits()).String()
	want6 := netip.PrefixFrom(b.plan.subnet6.Addr().Next(), b.plan.subnet6.Bits()).String()
	for deadline := time.Now().Add(startTimeout); ; time.Sleep(50 * time.Millisecond) {
		out, _ := exec.CommandContext(ctx, "ip", "-n", b.srv.Name, "-o", "addr", "show", "dev", bridgeName).Output()
		if strings.Contains(string(out), " "+want+" ") && strings.Contains(string(out), " "+want6+" ") {
			break
		}
		if err := b.cur.exited(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("vmlaned made no bridge %s with %s in %s; its output:\n%s", bridgeName, want, startTimeout, b.cur.logs)
		}
	}
	if err := b.stopServer(); err != nil {
		return err
	}
	if err := b.srv.IP(ctx, "link", "set", portName, "master", bridgeName); err != nil {
		return err
	}
	if b.cfg.family == 6 {
		if err := b.staticNeighbors(ctx); err != nil {
			return err
		}
		if err := b.untentative(ctx); err != nil {
			return err
		}
	}
	if b.gen, err = openLoadGen(b.load.Path, loadName, b.cfg.family); err != nil {
		return err
	}
	b.gen.busy = b.cfg.busy
	if b.cfg.busy.ownSocket {
		runtime.GOMAXPROCS(clientProcs(slices.Max(b.cfg.levels)))
	}
	if b.cfg.busy.burn > 0 {
		b.gen.vcpus, err = startVCPUs(slices.Max(b.cfg.levels))
	}
	return err
}

func (b *bench) stopServer() error {
	if b.cur == nil {
		return nil
	}
	err := b.cur.stop()
	b.cur = nil
	return err
}

// close stops the server and the clients; the namespaces go in cleanup.
func (b *bench) close() error {
	err := b.stopServer()
	if b.gen != nil {
		err = errors.Join(err, b.gen.close(), closeVCPUs(b.gen.vcpus))
	}
	return err
}

// measure runs every level. Each level starts both servers from fresh
// state: a lease file of CNI reservations, nothing bound, for vmlaned; an
// empty lease file and the same reservations as dhcp-hosts for dnsmasq.
// Within a level the servers take -rounds turns, the first one rotating,
// so that a burst of other load on the machine falls on both alike. A
// turn starts its server on that level's state, probes it until it
// answers, runs -warmup uncounted exchanges, then its share of the timed
// ones, each for a MAC no exchange of that level has used, and stops it.
func (b *bench) measure(ctx context.Context) ([]result, error) {
	ts := targets(b.cfg, b.srv, b.plan)
	var out []result
	for li, c := range b.cfg.levels {
		res := make([]result, len(ts))
		dirs := make([]string, len(ts))
		for k, t := range ts {
			res[k] = result{Server: t.name, Clients: c}
			dirs[k] = filepath.Join(b.tmp, fmt.Sprintf("level%d-c%d-%s", li, c, t.name))
			if err := os.Mkdir(dirs[k], 0o755); err != nil {
				return nil, err
			}
			if err := t.prepare(dirs[k]); err != nil {
				return nil, fmt.Errorf("preparing %s: %w", t.name, err)
			}
		}
		n := len(b.plan.timed)
		for r := range b.cfg.rounds {
			slice := b.plan.timed[r*n/b.cfg.rounds : (r+1)*n/b.cfg.rounds]
			for k := range ts {
				j := (li + r + k) % len(ts)
				if err := b.turn(ctx, ts[j], dirs[j], c, slice, &res[j]); err != nil {
					return nil, fmt.Errorf("%s, %d in flight, round %d: %w", ts[j].name, c, r+1, err)
				}
			}
		}
		for _, r := range res {
			p50, _ := r.quantile(0.5)
			fmt.Fprintf(b.log, "dhcpbench: %-7s %2d in flight: %d exchanges, %d timeouts, %.1f/s, p50 %s, server CPU %s per exchange\n",
				r.Server, c, r.n(), r.Timeouts, r.perSec(), fmtMS(p50, 2), fmtMS(r.cpuPer(), 3))
		}
		out = append(out, res...)
	}
	// With a socket per exchange the shared one sees every reply, none
	// of them its own.
	if n := b.gen.stray.Load(); n > 0 && !b.cfg.busy.ownSocket {
		fmt.Fprintf(b.log, "dhcpbench: %d replies came for no pending exchange (late replies to timed-out ones)\n", n)
	}
	return out, nil
}

// turn is one server's share of one round.
func (b *bench) turn(ctx context.Context, t target, dir string, c int, timed []reservation, res *result) error {
	var err error
	if b.cur, err = t.start(dir); err != nil {
		return err
	}
	defer b.stopServer()
	shown, err := b.probe(ctx)
	if err != nil {
		return err
	}
	if !b.shown[t.name] {
		b.shown[t.name] = true
		fmt.Fprintf(b.log, "dhcpbench: %s %s\n", t.name, shown)
	}
	if warm := b.plan.warm[1:]; len(warm) > 0 {
		_, to, _, err := b.gen.phase(ctx, warm, c, b.cfg.timeout)
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if to > 0 {
			fmt.Fprintf(b.log, "dhcpbench: %s: %d of %d warm-up exchanges timed out\n", t.name, to, len(warm))
		}
	}
	cpu0, err := b.cur.cpu()
	if err != nil {
		return err
	}
	lat, to, wall, err := b.gen.phase(ctx, timed, c, b.cfg.timeout)
	if err != nil {
		return err
	}
	cpu1, err := b.cur.cpu()
	if err != nil {
		return err
	}
	if err := b.cur.exited(); err != nil {
		return err
	}
	if bad := complaints(b.cur.logs.String()); len(bad) > 0 {
		fmt.Fprintf(b.log, "dhcpbench: %s logged %d warnings or errors, the first: %s\n", t.name, len(bad), bad[0])
	}
	res.Lat = append(res.Lat, lat...)
	res.Timeouts += to
	res.Wall += wall
	res.CPU += cpu1 - cpu0
	return b.stopServer()
}

// probe waits until the server just started answers a whole exchange,
// for the first warm-up reservation, and returns the last reply's size and
// options.
func (b *bench) probe(ctx context.Context) (string, error) {
	deadline := time.Now().Add(startTimeout)
	for {
		_, shown, err := b.gen.exchange(ctx, b.plan.warm[0], probeTimeout)
		if err == nil {
			return shown, nil
		}
		if !errors.Is(err, errTimeout) {
			return "", err
		}
		if err := b.cur.exited(); err != nil {
			return "", err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s answered no DHCP exchange in %s; its output:\n%s", b.cur.name, startTimeout, b.cur.logs)
		}
	}
}

// complaints picks the lines of a server's output that report trouble:
// vmlaned's warnings and errors, dnsmasq's failures (its routine lines
// say nothing of the kind, and --quiet-dhcp keeps per-packet ones out).
func complaints(logs string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		low := strings.ToLower(l)
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") ||
			(!strings.Contains(l, "level=") && (strings.Contains(low, "fail") || strings.Contains(low, "error") || strings.Contains(low, "warning"))) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// optionCodes lists the option codes of m in order, for the log line that
// shows both servers send the same set.
func optionCodes(m *dhcpv4.DHCPv4) string {
	var codes []int
	for c := range m.Options {
		codes = append(codes, int(c))
	}
	slices.Sort(codes)
	return strings.Trim(fmt.Sprint(codes), "[]")
}

// untentative waits until the bridge's link-local address has passed
// duplicate address detection, which starts when the port joins: Kea binds
// its DHCPv6 socket to that address, and cannot while it is tentative.
func (b *bench) untentative(ctx context.Context) error {
	for deadline := time.Now().Add(startTimeout); ; time.Sleep(50 * time.Millisecond) {
		out, err := exec.CommandContext(ctx, "ip", "-n", b.srv.Name, "-6", "addr", "show", "dev", bridgeName, "tentative").Output()
		if err != nil {
			return fmt.Errorf("listing tentative addresses of %s: %w", bridgeName, err)
		}
		if len(strings.TrimSpace(string(out))) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still has tentative addresses after %s: %s", bridgeName, startTimeout, out)
		}
	}
}

// staticNeighbors gives the server namespace a permanent neighbour entry
// for every client's link-local address: both servers send their replies
// through the kernel to the client's link-local address, and the clients,
// frames written by the load generator, answer no neighbour solicitation.
// It is the same for both servers.
func (b *bench) staticNeighbors(ctx context.Context) error {
	var cmds strings.Builder
	for _, rs := range [][]reservation{b.plan.warm, b.plan.timed} {
		for _, r := range rs {
			fmt.Fprintf(&cmds, "neigh replace %s lladdr %s dev %s nud permanent\n", linkLocal(r.mac), r.mac, bridgeName)
		}
	}
	cmd := exec.CommandContext(ctx, "ip", "-n", b.srv.Name, "-batch", "-")
	cmd.Stdin = strings.NewReader(cmds.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("adding the clients' neighbour entries: %w: %s", err, out)
	}
	return nil
}
