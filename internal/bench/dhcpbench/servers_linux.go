package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vmlane/vmlane/internal/bench/benchns"
	"github.com/vmlane/vmlane/leases"
)

// What both servers hand out besides the address, so they build replies
// of the same content: router and classless default route, DNS server,
// domain, search list, MTU, lease time (T1 and T2 by default).
const (
	bridgeName = "vmlane0"
	dnsServer  = "10.96.0.10"
	dnsServer6 = "fd00:96::a"
	domain     = "vmlane.test"
	mtu        = 1500
	leaseTime  = time.Hour
)

// target is one DHCP server under test: how to give it fresh state in a
// folder, and how to start it on that state in the server namespace.
type target struct {
	name    string
	prepare func(dir string) error
	start   func(dir string) (*server, error)
}

func targets(cfg config, srvNS *benchns.NS, p plan) []target {
	ts := []target{
		{
			name:    "vmlaned",
			prepare: func(dir string) error { return writeReservations(filepath.Join(dir, "leases.json"), p) },
			start: func(dir string) (*server, error) {
				return startServer("vmlaned", srvNS.Command(cfg.vmlaned, vmlanedArgs(dir, p)...))
			},
		},
		{
			name: "dnsmasq",
			prepare: func(dir string) error {
				return os.WriteFile(filepath.Join(dir, "hosts"), []byte(p.dnsmasqHosts()), 0o644)
			},
			start: func(dir string) (*server, error) {
				return startServer("dnsmasq", srvNS.Command(cfg.dnsmasq, dnsmasqArgs(dir, p)...))
			},
		},
	}
	if (cfg.family == 4 && cfg.kea4 != "") || (cfg.family == 6 && cfg.kea6 != "") {
		ts = append(ts, keaTarget(cfg, srvNS, p))
	}
	return ts
}

func vmlanedArgs(dir string, p plan) []string {
	return []string{
		"--pod-cidr", p.subnet.String() + "," + p.subnet6.String(),
		"--lease-file", filepath.Join(dir, "leases.json"),
		"--cni-conf-dir", filepath.Join(dir, "net.d"),
		// Its own namespace's loopback: no port there is taken.
		"--health-addr", "127.0.0.1:19465",
		"--metrics-addr", "127.0.0.1:19464",
		"--bridge", bridgeName,
		"--mtu", strconv.Itoa(mtu),
		"--lease-time", leaseTime.String(),
		"--dns", dnsServer + "," + dnsServer6,
		"--domain", domain,
		"--search", domain,
	}
}

// dnsmasqArgs configures dnsmasq as vmlaned is: reservations only
// (a static range), authoritative, no ping before an offer, no DNS, on the
// bridge alone, the same options. --quiet-dhcp keeps it from logging every
// packet, as vmlaned does not at its default level; it still writes and
// fsyncs its lease file on every new lease, as vmlaned does.
func dnsmasqArgs(dir string, p plan) []string {
	mask := net.IP(net.CIDRMask(p.subnet.Bits(), 32)).String()
	gw := p.gateway.String()
	return []string{
		"--keep-in-foreground",
		"--conf-file=/dev/null",
		"--no-resolv", "--no-hosts",
		"--port=0",
		"--interface=" + bridgeName, "--bind-interfaces",
		"--dhcp-authoritative",
		"--no-ping",
		fmt.Sprintf("--dhcp-range=%s,static,%s,%ds", p.subnet.Addr(), mask, int(leaseTime.Seconds())),
		"--dhcp-hostsfile=" + filepath.Join(dir, "hosts"),
		"--dhcp-leasefile=" + filepath.Join(dir, "dnsmasq.leases"),
		fmt.Sprintf("--dhcp-lease-max=%d", len(p.warm)+len(p.timed)),
		"--dhcp-option=option:router," + gw,
		"--dhcp-option=option:classless-static-route,0.0.0.0/0," + gw,
		"--dhcp-option=option:dns-server," + dnsServer,
		"--dhcp-option=option:domain-name," + domain,
		"--dhcp-option=option:domain-search," + domain,
		fmt.Sprintf("--dhcp-option=option:mtu,%d", mtu),
		// DHCPv6 too, from the same reservations (the hosts file gives
		// each MAC its [ip6]), with the same options.
		fmt.Sprintf("--dhcp-range=%s,static,%d,%ds", p.subnet6.Addr(), p.subnet6.Bits(), int(leaseTime.Seconds())),
		"--dhcp-option=option6:dns-server,[" + dnsServer6 + "]",
		"--dhcp-option=option6:domain-search," + domain,
		"--quiet-dhcp", "--quiet-dhcp6",
		"--log-facility=-",
		"--pid-file=" + filepath.Join(dir, "dnsmasq.pid"),
		"--user=root", "--group=root",
	}
}

// writeReservations writes the plan to a fresh lease file as the CNI
// plugin does on ADD: one CNI reservation per VM NIC, keyed by its
// attachment, with its pod, MAC and address. All go in one Update.
func writeReservations(path string, p plan) error {
	s, err := leases.Open(path, p.subnet, p.gateway, leases.WithSubnet6(p.subnet6, p.subnet6.Addr().Next()))
	if err != nil {
		return err
	}
	return s.Update(func(tx *leases.Tx) error {
		for i, r := range append(append([]reservation{}, p.warm...), p.timed...) {
			id := fmt.Sprintf("dhcpbench%05d", i)
			if _, err := tx.Reserve(leases.ReserveRequest{
				Key:      leases.Key{ContainerID: id, IfName: "eth0"},
				Source:   leases.SourceCNI,
				IP:       r.ip,
				IP6:      r.ip6,
				MAC:      r.mac.String(),
				NetNS:    "/var/run/netns/" + id,
				Pod:      leases.Pod{Namespace: "default", Name: r.name, UID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i)},
				Hostname: r.name,
			}); err != nil {
				return fmt.Errorf("reserving %s for %s: %w", r.ip, r.mac, err)
			}
		}
		return nil
	})
}

// server is a running DHCP server process.
type server struct {
	name string
	cmd  *exec.Cmd
	logs *tail
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done
}

func startServer(name string, cmd *exec.Cmd) (*server, error) {
	s := &server{name: name, cmd: cmd, logs: &tail{max: 16 << 10}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// exited returns why the server is gone, or nil while it runs.
func (s *server) exited() error {
	select {
	case <-s.done:
		return fmt.Errorf("%s exited (%v); its output:\n%s", s.name, s.err, s.logs)
	default:
		return nil
	}
}

// stop sends SIGTERM, and SIGKILL after five seconds. Both servers write
// their lease file before they exit on SIGTERM.
func (s *server) stop() error {
	if s.exited() != nil {
		return nil
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("%s ignored SIGTERM for 5s; killed", s.name)
	}
}

// cpu is the server's on-CPU time so far, every thread, user and system,
// in nanoseconds from the scheduler (/proc/PID/task/*/schedstat) rather
// than in clock ticks: a tick is 10 ms, more than many exchanges cost.
// Go never ends a thread it has started (vmlaned locks none), so no time
// is lost with an exited thread.
func (s *server) cpu() (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", s.cmd.Process.Pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("reading CPU time of %s: %w", s.name, err)
	}
	var sum time.Duration
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing %s/%s/schedstat: %w", dir, e.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
