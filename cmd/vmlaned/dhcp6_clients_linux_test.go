package main

import (
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

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/leases"
)

// The DHCPv6 clients. Each reports, through the options map, the address
// it was given ("ip6"), and the DNS servers and search list.

// dhclient6Conf asks for the DNS options.
const dhclient6Conf = `request dhcp6.name-servers, dhcp6.domain-search;
`

var dhclient6 = &clientKind{
	name: "dhclient6", tools: []string{"dhclient"},
	bound: "BOUND6", renewed: "RENEW6", released: "RELEASE6", failed: []string{"EXPIRE6", "FAIL6", "STOP6"},
	command: func(t *testing.T, c *client, probe bool) *exec.Cmd {
		return c.ns.Command("dhclient", c.dhclient6Args(t, "-d")...)
	},
	release: func(t *testing.T, c *client) { c.ns.MustRun(t, "dhclient", c.dhclient6Args(t, "-r")...) },
	options: func(env map[string]string) map[string]string {
		return map[string]string{
			"ip6": env["new_ip6_address"], "dns": words(env["new_dhcp6_name_servers"]), "search": words(env["new_dhcp6_domain_search"]),
		}
	},
}

func (c *client) dhclient6Args(t *testing.T, mode string) []string {
	cf := c.write(t, "dhclient6.conf", dhclient6Conf, 0o644)
	return []string{"-6", mode, "-v", "-cf", cf, "-lf", filepath.Join(c.dir, "dhclient6.leases"),
		"-pf", filepath.Join(c.dir, "dhclient6.pid"), "-sf", c.script, "eth0"}
}

// dhcpcd6Conf: IPv6 only, DHCPv6 started by the router advertisement's M
// flag as on any host, the DNS options asked for.
const dhcpcd6Conf = `ipv6only
nodelay
option dhcp6_name_servers, dhcp6_domain_search
`

var dhcpcd6 = &clientKind{
	name: "dhcpcd6", tools: []string{"dhcpcd", "nsenter"},
	bound: "BOUND6", renewed: "RENEW6", released: "RELEASE6", failed: []string{"EXPIRE6", "NAK6"},
	command: func(t *testing.T, c *client, probe bool) *exec.Cmd {
		c.write(t, "dhcpcd.conf", dhcpcd6Conf, 0o644)
		for _, d := range []string{"run", "db"} {
			os.Mkdir(filepath.Join(c.dir, d), 0o755)
		}
		return c.ns.Command("sh", "-c", `mount --bind "$1" /run && mount --bind "$2" /var/lib/dhcpcd && shift 2 && exec "$@"`,
			"sh", filepath.Join(c.dir, "run"), filepath.Join(c.dir, "db"),
			"dhcpcd", "-6", "-B", "-d", "-f", filepath.Join(c.dir, "dhcpcd.conf"), "-c", c.script, "eth0")
	},
	renew:   func(t *testing.T, c *client) { c.dhcpcd6Control(t, "--renew") },
	release: func(t *testing.T, c *client) { c.dhcpcd6Control(t, "--release") },
	options: func(env map[string]string) map[string]string {
		return map[string]string{
			"ip6": env["new_dhcp6_ia_na1_ia_addr1"], "dns": words(env["new_dhcp6_name_servers"]), "search": words(env["new_dhcp6_domain_search"]),
		}
	},
}

func (c *client) dhcpcd6Control(t *testing.T, verb string) {
	t.Helper()
	pid := strconv.Itoa(c.cmd.Process.Pid)
	if out, err := exec.Command("nsenter", "-t", pid, "-m", "-n", "dhcpcd", "-6", verb, "eth0").CombinedOutput(); err != nil {
		t.Fatalf("dhcpcd %s: %v\n%s", verb, err, out)
	}
}

// udhcpc6 is busybox's DHCPv6 client, from the busybox the tests build
// (Debian's has none): VMLANE_UDHCPC6 names it.
var udhcpc6 = &clientKind{
	name: "udhcpc6", tools: []string{},
	bound: "bound", renewed: "renew", released: "deconfig", failed: []string{"leasefail", "nak"},
	// It sends renewals and its release from the address it got.
	configures: true,
	command: func(t *testing.T, c *client, probe bool) *exec.Cmd {
		return c.ns.Command(udhcpc6Bin(t), "udhcpc6", "-f", "-i", "eth0", "-s", c.script, "-t", "10", "-T", "1", "-O", "dns", "-O", "search")
	},
	renew:   func(t *testing.T, c *client) { c.signal(t, syscall.SIGUSR1) },
	release: func(t *testing.T, c *client) { c.signal(t, syscall.SIGUSR2) },
	options: func(env map[string]string) map[string]string {
		// It prints addresses in full ("fd00:0096:0000:…").
		return map[string]string{"ip6": canonAddrs(env["ipv6"]), "dns": canonAddrs(env["dns"]), "search": words(env["search"])}
	},
}

// udhcpc6Bin is the busybox with udhcpc6 (VMLANE_UDHCPC6, which make test
// sets): the test fails under VMLANE_PRIVILEGED=require without it.
func udhcpc6Bin(t *testing.T) string {
	t.Helper()
	p := os.Getenv("VMLANE_UDHCPC6")
	if p == "" {
		privtest.Missing(t, "VMLANE_UDHCPC6 (a busybox with udhcpc6: make udhcpc6)")
	}
	return p
}

// TestDHCPv6Clients runs ISC dhclient -6, dhcpcd -6 and busybox udhcpc6,
// each on a bridge port with the MAC of its own VM reservation on a
// dual-stack node, against vmlaned's DHCPv6 server and router
// advertisements. Each gets exactly the IPv6 address its reservation
// holds, with the DNS servers and search list; its renewal moves the
// binding's expiry forward; its release ends the binding, the reservation
// kept.
func TestDHCPv6Clients(t *testing.T) {
	t.Parallel()
	privtest.Require(t, "ip", "iptables", "nsenter")
	bin := buildBinaries(t)
	d := startStandalone(t, bin, netnstest.New(t, "node6"), "10.250.44.0/24,fd00:250:44::/64", "--lease-time", "1m",
		"--dns", "10.96.0.10,fd00:96::a", "--search", "default.svc.cluster.local,svc.cluster.local", "--log-level", "debug")
	want := map[string]string{"dns": "fd00:96::a", "search": "default.svc.cluster.local svc.cluster.local"}
	kinds := []*clientKind{dhclient6, dhcpcd6}
	if os.Getenv("VMLANE_UDHCPC6") != "" || privtest.Required() {
		kinds = append(kinds, udhcpc6)
	}
	var clients []*client
	for _, k := range kinds {
		c := newClient(t, d, k, k.name)
		if c.ip6 == "" {
			t.Fatalf("%s: the CNI result has no IPv6 address", k.name)
		}
		// As ifupdown does before it starts dhclient -6, which cannot
		// bind to a tentative address.
		waitLinkLocal(t, c.ns)
		c.start(t, false)
		clients = append(clients, c)
	}
	each := phases(t, clients)
	each("bind", func(t *testing.T, c *client) {
		ev := c.waitEvent6(t, c.kind.bound, 0)
		c.checkOptions6(t, ev, want)
		l := c.waitLease(t, d, "bound over DHCPv6", func(l leases.Lease) bool { return l.State6 == leases.StateBound })
		if l.IP6.String() != c.ip6 || l.MAC != c.mac || !within(l.Expires6, time.Now().Add(time.Minute), 10*time.Second) {
			t.Errorf("lease after bind: %+v, want ip6 %s bound to %s for a minute", l, c.ip6, c.mac)
		}
	})
	each("renew", func(t *testing.T, c *client) {
		old := c.lease(t, d)
		time.Sleep(time.Until(old.Expires6.Add(-59*time.Second + 100*time.Millisecond)))
		mark := c.last()
		if c.kind.renew != nil {
			c.kind.renew(t, c)
		}
		c.checkOptions6(t, c.waitEvent6(t, c.kind.renewed, mark), want)
		c.waitLease(t, d, "renewed", func(l leases.Lease) bool { return l.Expires6.After(old.Expires6) && l.State6 == leases.StateBound })
		for _, r := range c.reasons(0) {
			if slices.Contains(c.kind.failed, r) {
				t.Errorf("the script saw %s; every reason: %v", r, c.reasons(0))
			}
		}
	})
	each("release", func(t *testing.T, c *client) {
		mark := c.last()
		c.kind.release(t, c)
		c.waitEvent6(t, c.kind.released, mark)
		l := c.waitLease(t, d, "released", func(l leases.Lease) bool { return l.State6 == "" })
		if l.IP6.String() != c.ip6 || !l.Expires6.IsZero() || l.ContainerID != c.cid {
			t.Errorf("lease after release: %+v, want ip6 %s kept for attachment %s, unbound", l, c.ip6, c.cid)
		}
	})
}

// waitEvent6 is waitEvent with the time a client needs to get going on
// IPv6: its link-local address passes DAD first, and dhclient renews at
// T1 (half the one-minute lease), as it has no "renew now".
func (c *client) waitEvent6(t *testing.T, reason string, after int) event {
	t.Helper()
	return c.waitEventFor(t, reason, after, 45*time.Second)
}

func (c *client) checkOptions6(t *testing.T, ev event, want map[string]string) {
	t.Helper()
	w := map[string]string{"ip6": c.ip6}
	for k, v := range want {
		w[k] = v
	}
	got := c.kind.options(ev.env)
	for k := range w {
		if got[k] != w[k] {
			t.Errorf("%s: %s on %s = %q, want %q", c.kind.name, k, ev.reason, got[k], w[k])
		}
	}
}

// waitLinkLocal waits until eth0's link-local address has passed DAD.
func waitLinkLocal(t *testing.T, ns *netnstest.NS) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, _ := ns.Run("ip", "-6", "addr", "show", "dev", "eth0", "scope", "link")
		if strings.Contains(out, "inet6 fe80::") && !strings.Contains(out, "tentative") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("eth0 has no usable link-local address:\n%s", out)
		}
	}
}

// canonAddrs writes each address of a list in its canonical form.
func canonAddrs(s string) string {
	f := strings.Fields(s)
	for i, w := range f {
		if a, err := netip.ParseAddr(w); err == nil {
			f[i] = a.String()
		}
	}
	return strings.Join(f, " ")
}
