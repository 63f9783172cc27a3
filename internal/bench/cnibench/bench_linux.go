package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vmlane/vmlane/internal/bench/benchns"
	"github.com/vmlane/vmlane/internal/testing/syncbuf"
	"github.com/vmlane/vmlane/leases"
)

const (
	// subnet is every target's pod subnet: a /16, so no run comes near
	// filling it and allocation cost does not depend on the target.
	subnet = "10.251.0.0/16"
	// cniVersion is the newest spec both vmlane and the reference speak.
	cniVersion = "1.1.0"
	// netName is the conflist's name; host-local keeps its leases in a
	// folder of that name under its dataDir.
	netName = "cnibench"
	refName = "bridge+host-local"
)

// target is one plugin config under test.
type target struct {
	name   string
	bridge string
	// plugin is the conflist's single plugin entry, given the target's
	// temp folder.
	plugin func(dir string) map[string]any
	// held lists the addresses the plugin's store still holds.
	held func(dir string) ([]string, error)
	// daemon, when set, is vmlaned's command line in the target's node
	// namespace, given the temp folder: it runs for the whole bench.
	daemon func(dir string) []string
}

// floorTargets are the netlinkfloor plugin in both modes.
func floorTargets() []target {
	floor := func(vm bool) func(string) map[string]any {
		return func(string) map[string]any {
			return map[string]any{"type": "netlinkfloor", "bridge": "nlfbr0", "subnet": subnet, "vm": vm}
		}
	}
	none := func(string) ([]string, error) { return nil, nil }
	return []target{
		{name: floorName, bridge: "nlfbr0", plugin: floor(false), held: none},
		{name: floorName + "-vm", bridge: "nlfbr0", plugin: floor(true), held: none},
	}
}

// daemonTarget is vmlane (plain) with vmlaned running beside it, as on a
// node: standalone (--pod-cidr), on the same lease file, sweeping the
// anti-spoofing entries DEL leaves every --anti-spoof-period.
func daemonTarget(vmlaned string) target {
	t := targets()[0]
	t.name = "vmlane+vmlaned"
	t.daemon = func(dir string) []string {
		return []string{vmlaned, "--pod-cidr", subnet, "--lease-file", filepath.Join(dir, "leases.json"),
			"--cni-conf-dir", filepath.Join(dir, "net.d"), "--anti-spoof-period", "2s",
			"--health-addr", "127.0.0.1:19465", "--metrics-addr", "127.0.0.1:19464"}
	}
	return t
}

func targets() []target {
	vmlane := func(vm bool) func(string) map[string]any {
		return func(dir string) map[string]any {
			return map[string]any{
				"type":      "vmlane",
				"bridge":    "vmlane0",
				"subnet":    subnet,
				"leaseFile": filepath.Join(dir, "leases.json"),
				"vm":        vm,
			}
		}
	}
	return []target{
		{name: "vmlane", bridge: "vmlane0", plugin: vmlane(false), held: vmlaneHeld},
		{name: "vmlane-vm", bridge: "vmlane0", plugin: vmlane(true), held: vmlaneHeld},
		{
			name:   refName,
			bridge: "cni0",
			plugin: func(dir string) map[string]any {
				return map[string]any{
					"type":      "bridge",
					"bridge":    "cni0",
					"isGateway": true,
					"ipMasq":    false,
					"ipam": map[string]any{
						"type":    "host-local",
						"ranges":  [][]map[string]string{{{"subnet": subnet}}},
						"dataDir": filepath.Join(dir, "host-local"),
					},
				}
			},
			held: hostLocalHeld,
		},
	}
}

func vmlaneHeld(dir string) ([]string, error) {
	s, err := leases.Read(filepath.Join(dir, "leases.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, l := range s.Leases() {
		ips = append(ips, l.IP.String())
	}
	return ips, nil
}

// hostLocalHeld lists host-local's per-address files (its lock and
// last_reserved_ip files are not leases).
func hostLocalHeld(dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "host-local", netName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, e := range ents {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			ips = append(ips, e.Name())
		}
	}
	return ips, nil
}

// bench is one target set up: its node namespace, pod pool and libcni.
type bench struct {
	target
	dir  string
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList
	node *benchns.NS
	pods []*benchns.NS
	// daemon is the target's vmlaned, if any, and its log.
	daemon *exec.Cmd
	exited chan struct{}
	logs   syncbuf.Buffer
}

func newBench(ctx context.Context, t target, tmp, binDir string, nss *benchns.Run, pool int) (*bench, error) {
	dir, err := os.MkdirTemp(tmp, t.name+"-")
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(map[string]any{"cniVersion": cniVersion, "name": netName, "plugins": []any{t.plugin(dir)}})
	if err != nil {
		return nil, err
	}
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("parsing conflist of %s: %w", t.name, err)
	}
	b := &bench{
		target: t,
		dir:    dir,
		cni:    libcni.NewCNIConfigWithCacheDir([]string{binDir}, filepath.Join(dir, "cache"), nil),
		list:   list,
	}
	if b.node, err = nss.Create(ctx, "node"); err != nil {
		return nil, err
	}
	for range pool {
		pod, err := nss.Create(ctx, "pod")
		if err != nil {
			return nil, err
		}
		b.pods = append(b.pods, pod)
	}
	if t.daemon != nil {
		if err := b.startDaemon(ctx); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// startDaemon starts the target's vmlaned in its node namespace and waits
// until its DHCP server is up on the bridge, which it makes.
func (b *bench) startDaemon(ctx context.Context) error {
	if err := b.node.IP(ctx, "link", "set", "lo", "up"); err != nil {
		return err
	}
	args := b.target.daemon(b.dir)
	b.daemon = b.node.Command(args[0], args[1:]...)
	b.daemon.Stdout, b.daemon.Stderr = &b.logs, &b.logs
	if err := b.daemon.Start(); err != nil {
		return fmt.Errorf("%s: starting vmlaned: %w", b.name, err)
	}
	exited := make(chan struct{})
	b.exited = exited
	go func() { b.daemon.Wait(); close(exited) }()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(b.logs.String(), "DHCP server up"); {
		select {
		case <-exited:
			return fmt.Errorf("%s: vmlaned exited:\n%s", b.name, b.logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: vmlaned's DHCP server not up after 30s:\n%s", b.name, b.logs.String())
		}
	}
	return nil
}

// stop ends the target's vmlaned, if any, and reports how it ended: it
// must still have been running.
func (b *bench) stop() error {
	if b.daemon == nil {
		return nil
	}
	select {
	case <-b.exited:
		return fmt.Errorf("%s: vmlaned exited during the bench:\n%s", b.name, b.logs.String())
	default:
	}
	if err := b.daemon.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-b.exited:
		return nil
	case <-time.After(10 * time.Second):
		b.daemon.Process.Kill()
		<-b.exited
		return fmt.Errorf("%s: vmlaned still running 10s after SIGTERM; killed", b.name)
	}
}

// iterate runs one ADD and then one DEL of attachment id in pod and times
// each around its libcni call only. Both run from one thread switched into
// the node namespace once.
func (b *bench) iterate(ctx context.Context, id string, pod *benchns.NS) (add, del time.Duration, err error) {
	rt := &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       pod.Path,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", "pod-" + id},
			{"K8S_POD_UID", "uid-" + id},
		},
	}
	err = b.node.Do(func() error {
		start := time.Now()
		if _, err := b.cni.AddNetworkList(ctx, b.list, rt); err != nil {
			return fmt.Errorf("%s: ADD %s: %w", b.name, id, err)
		}
		add = time.Since(start)
		start = time.Now()
		if err := b.cni.DelNetworkList(ctx, b.list, rt); err != nil {
			return fmt.Errorf("%s: DEL %s: %w", b.name, id, err)
		}
		del = time.Since(start)
		return nil
	})
	return add, del, err
}

// run does iterations [lo, hi) shared among workers and records their
// latencies in add and del. Worker w does iterations lo+w, lo+w+workers, …
// and uses pod i mod len(pods), which with len(pods) a multiple of workers
// is never another worker's. Container IDs are tag-i: unique within the
// target, and in the characters the CNI spec allows. The first error stops
// every worker.
//
// With ids > 0 the container IDs repeat: tag-(i mod ids), as a runtime
// that retries, or a kubelet that restarts, uses an ID again. ids is a
// multiple of workers, so an ID is always the same worker's.
func (b *bench) run(ctx context.Context, tag string, lo, hi, workers, ids int, add, del *series) error {
	if len(b.pods)%workers != 0 {
		return fmt.Errorf("%d pod namespaces cannot be shared among %d workers", len(b.pods), workers)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := lo + w; i < hi && ctx.Err() == nil; i += workers {
				id := i
				if ids > 0 {
					id = i % ids
				}
				a, d, err := b.iterate(ctx, fmt.Sprintf("%s-%d", tag, id), b.pods[i%len(b.pods)])
				if err != nil {
					cancel(err)
					return
				}
				add.Lat[i], del.Lat[i] = a, d
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// leftovers names everything an ADD made that its DEL did not remove.
func (b *bench) leftovers(ctx context.Context) error {
	var errs []error
	held, err := b.held(b.dir)
	if err != nil {
		errs = append(errs, fmt.Errorf("reading the address store: %w", err))
	} else if len(held) > 0 {
		errs = append(errs, fmt.Errorf("%d addresses still held: %v", len(held), held))
	}
	links, err := b.node.Links(ctx)
	if err != nil {
		errs = append(errs, err)
	} else if links = slices.DeleteFunc(links, func(l string) bool { return l == "lo" || l == b.bridge }); len(links) > 0 {
		errs = append(errs, fmt.Errorf("links left in the node namespace: %v", links))
	}
	for _, pod := range b.pods {
		links, err := pod.Links(ctx)
		if err != nil {
			errs = append(errs, err)
		} else if len(links) != 1 || links[0] != "lo" {
			errs = append(errs, fmt.Errorf("links left in %s: %v", pod.Name, links))
		}
	}
	cached, err := os.ReadDir(filepath.Join(b.dir, "cache", "results"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	} else if len(cached) > 0 {
		errs = append(errs, fmt.Errorf("%d results left in libcni's cache", len(cached)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s leaked: %w", b.name, err)
	}
	return nil
}

// measure runs every target: warmup, then each mode in rounds, then the
// leak check. Within a mode the targets take turns, -n/rounds iterations
// at a time (the first turn rotating each round), so that a burst of
// other load on the machine falls on all of them alike rather than on
// whichever target happened to be running.
func measure(ctx context.Context, benches []*bench, cfg config, log io.Writer) ([]series, error) {
	for _, b := range benches {
		for i := range cfg.warmup {
			if _, _, err := b.iterate(ctx, fmt.Sprintf("warmup-%d", i), b.pods[i%len(b.pods)]); err != nil {
				return nil, err
			}
		}
	}
	var out []series
	conc := fmt.Sprintf("concurrent(%d)", cfg.concurrency)
	for _, m := range []struct {
		mode, tag string
		workers   int
		ids       int
	}{
		{"sequential", "seq", 1, 0},
		{conc, "conc", cfg.concurrency, 0},
		{"sequential, same IDs", "rseq", 1, cfg.churnIDs},
		{conc + ", same IDs", "rconc", cfg.concurrency, cfg.churnIDs},
	} {
		if m.ids > 0 {
			// Round 1 of the repeated IDs, untimed: the timed
			// iterations then all use an ID that has been added and
			// deleted before.
			for _, b := range benches {
				scratch := series{Lat: make([]time.Duration, m.ids)}
				if err := b.run(ctx, m.tag, 0, m.ids, m.workers, m.ids, &scratch, &scratch); err != nil {
					return nil, err
				}
			}
		}
		adds := make([]series, len(benches))
		dels := make([]series, len(benches))
		spent := make([]time.Duration, len(benches))
		cpu := make([]time.Duration, len(benches))
		for j, b := range benches {
			adds[j] = series{Plugin: b.name, Mode: m.mode, Op: "ADD", Workers: m.workers, Lat: make([]time.Duration, cfg.n)}
			dels[j] = series{Plugin: b.name, Mode: m.mode, Op: "DEL", Workers: m.workers, Lat: make([]time.Duration, cfg.n)}
		}
		rounds := min(cfg.rounds, cfg.n)
		for r := range rounds {
			lo, hi := r*cfg.n/rounds, (r+1)*cfg.n/rounds
			for k := range benches {
				j := (r + k) % len(benches)
				start, cpu0 := time.Now(), childCPU()
				if err := benches[j].run(ctx, m.tag, lo, hi, m.workers, m.ids, &adds[j], &dels[j]); err != nil {
					return nil, err
				}
				spent[j] += time.Since(start)
				cpu[j] += childCPU() - cpu0
			}
		}
		for j, b := range benches {
			fmt.Fprintf(log, "cnibench: %s %s: %d ADD+DEL in %.1fs, plugin CPU %s per ADD+DEL\n",
				b.name, m.mode, cfg.n, spent[j].Seconds(), ms(cpu[j]/time.Duration(cfg.n)))
			adds[j].Wall, dels[j].Wall = spent[j], spent[j]
			out = append(out, adds[j], dels[j])
		}
	}
	var errs []error
	for _, b := range benches {
		errs = append(errs, b.stop(), b.leftovers(ctx))
	}
	return out, errors.Join(errs...)
}

// childCPU is the user+system time of every plugin process run so far
// (and of what they ran, such as bridge's host-local): a cost that, unlike
// latency, other load on the machine barely moves. Only turns of a single
// target run between two readings, so the difference is that target's.
func childCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
