package main

import (
	"fmt"
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

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/leases"
)

// clientKind is one real DHCP client program and how to drive it.
type clientKind struct {
	name  string
	tools []string
	// The script reasons for a new binding, a renewal, a release; failed
	// are the reasons that mean the server refused or stopped answering.
	bound, renewed, released string
	failed                   []string
	configures               bool // the script must set the address
	// command is the resident client; probe asks it to ARP-probe the
	// offered address first (RFC 5227) and decline it if it is in use.
	command func(t *testing.T, c *client, probe bool) *exec.Cmd
	// renew makes it renew now; nil: it renews on its own within seconds.
	renew   func(t *testing.T, c *client)
	release func(t *testing.T, c *client)
	// options maps its script's environment to option names common to
	// every client: ip, mask, broadcast, router, dns, domain, search,
	// hostname, mtu, lease, t1, t2, serverid, routes. hidden are those
	// it cannot show.
	options func(env map[string]string) map[string]string
	hidden  []string
}

var udhcpc = &clientKind{
	name: "udhcpc", tools: []string{"busybox"},
	bound: "bound", renewed: "renew", released: "deconfig", failed: []string{"nak", "leasefail"},
	configures: true,
	command: func(t *testing.T, c *client, probe bool) *exec.Cmd {
		args := []string{"udhcpc", "-f", "-i", "eth0", "-s", c.script, "-t", "10", "-T", "1", "-A", "1",
			"-O", "mtu", "-O", "search", "-O", "staticroutes"}
		if probe {
			args = append(args, "-a")
		}
		return c.ns.Command("busybox", args...)
	},
	// SIGUSR1 is udhcpc's "renew now", SIGUSR2 its "release now" (busybox
	// 1.35's `-R` quits before it counts itself bound and sends nothing).
	renew:   func(t *testing.T, c *client) { c.signal(t, syscall.SIGUSR1) },
	release: func(t *testing.T, c *client) { c.signal(t, syscall.SIGUSR2) },
	options: func(env map[string]string) map[string]string {
		return map[string]string{
			"ip": env["ip"], "mask": env["subnet"], "broadcast": env["broadcast"], "router": env["router"],
			"dns": words(env["dns"]), "domain": env["domain"], "search": words(env["search"]), "hostname": env["hostname"],
			"mtu": env["mtu"], "lease": env["lease"], "serverid": env["serverid"], "routes": words(env["staticroutes"]),
		}
	},
	hidden: []string{"t1", "t2"}, // busybox passes no options 58 and 59 to its script
}

// dhclientConf asks for every option vmlaned serves. dhclient knows no
// name for option 121, so it is declared as Debian's dhclient.conf does.
// The renewal time is superseded so that the client renews every few
// seconds instead of at the server's T1 (30 s with the shortest lease
// vmlaned allows); the renewals still go to the server and need its ACK.
const dhclientConf = `option rfc3442-classless-static-routes code 121 = array of unsigned integer 8;
initial-interval 1;
request subnet-mask, broadcast-address, routers, domain-name-servers, domain-name, domain-search,
	host-name, interface-mtu, rfc3442-classless-static-routes, dhcp-lease-time, dhcp-server-identifier;
supersede dhcp-renewal-time 3;
`

var dhclient = &clientKind{
	name: "dhclient", tools: []string{"dhclient"},
	bound: "BOUND", renewed: "RENEW", released: "RELEASE", failed: []string{"EXPIRE", "FAIL", "TIMEOUT"},
	configures: true,
	command: func(t *testing.T, c *client, probe bool) *exec.Cmd {
		return c.ns.Command("dhclient", c.dhclientArgs(t, "-d")...)
	},
	// `dhclient -r` stops the running dhclient (its pid file) and sends
	// the RELEASE itself, from the lease file.
	release: func(t *testing.T, c *client) { c.ns.MustRun(t, "dhclient", c.dhclientArgs(t, "-r")...) },
	options: func(env map[string]string) map[string]string {
		o := newOptions(env)
		o["routes"] = rfc3442(env["new_rfc3442_classless_static_routes"])
		return o
	},
	hidden: []string{"t1"}, // superseded in dhclientConf
}

// dhcpcdConf asks for every option vmlaned serves; IPv4 only, no link-local
// fallback, no start-up delay. ARP probing is on unless the test writes
// noarp (probing a free address costs some seconds).
const dhcpcdConf = `ipv4only
noipv4ll
nodelay
option subnet_mask, broadcast_address, routers, domain_name_servers, domain_name, domain_search
option host_name, interface_mtu, classless_static_routes
`

var dhcpcd = &clientKind{
	name: "dhcpcd", tools: []string{"dhcpcd", "nsenter"},
	bound: "BOUND", renewed: "RENEW", released: "STOP", failed: []string{"NAK", "EXPIRE"},
	command: func(t *testing.T, c *client, probe bool) *exec.Cmd {
		conf := dhcpcdConf
		if !probe {
			conf += "noarp\n"
		}
		c.write(t, "dhcpcd.conf", conf, 0o644)
		// dhcpcd's run and database folders are compiled in
		// (/run/dhcpcd, /var/lib/dhcpcd). `ip netns exec` gives the client
		// a mount namespace of its own: bind private folders over them
		// there, so clients do not share pid files or leases, and nothing
		// is left on the host.
		for _, d := range []string{"run", "db"} {
			os.Mkdir(filepath.Join(c.dir, d), 0o755)
		}
		return c.ns.Command("sh", "-c", `mount --bind "$1" /run && mount --bind "$2" /var/lib/dhcpcd && shift 2 && exec "$@"`,
			"sh", filepath.Join(c.dir, "run"), filepath.Join(c.dir, "db"),
			"dhcpcd", "-4", "-B", "-d", "-f", filepath.Join(c.dir, "dhcpcd.conf"), "-c", c.script, "eth0")
	},
	renew:   func(t *testing.T, c *client) { c.dhcpcdControl(t, "--renew") },
	release: func(t *testing.T, c *client) { c.dhcpcdControl(t, "--release") },
	options: func(env map[string]string) map[string]string {
		o := newOptions(env)
		o["routes"] = words(env["new_classless_static_routes"])
		return o
	},
}

// dhclientArgs are dhclient's flags with private config, lease, pid file
// and script, so nothing under /etc or /var/lib/dhcp is used.
func (c *client) dhclientArgs(t *testing.T, mode string) []string {
	cf := c.write(t, "dhclient.conf", dhclientConf, 0o644)
	return []string{"-4", mode, "-v", "-cf", cf, "-lf", filepath.Join(c.dir, "dhclient.leases"),
		"-pf", filepath.Join(c.dir, "dhclient.pid"), "-sf", c.script, "eth0"}
}

// dhcpcdControl runs `dhcpcd -4 verb eth0` as a user would, in the running
// dhcpcd's mount namespace, where its pid file and control socket are.
func (c *client) dhcpcdControl(t *testing.T, verb string) {
	t.Helper()
	pid := strconv.Itoa(c.cmd.Process.Pid)
	if out, err := exec.Command("nsenter", "-t", pid, "-m", "-n", "dhcpcd", "-4", verb, "eth0").CombinedOutput(); err != nil {
		t.Fatalf("dhcpcd %s: %v\n%s", verb, err, out)
	}
}

// checkOptions compares every option the client saw with what vmlaned was
// told to serve.
func (c *client) checkOptions(t *testing.T, ev event, want map[string]string) {
	t.Helper()
	w := map[string]string{"ip": c.ip, "hostname": c.pod}
	for k, v := range want {
		w[k] = v
	}
	got := c.kind.options(ev.env)
	for _, k := range c.kind.hidden {
		delete(w, k)
		delete(got, k)
	}
	if diff := cmp.Diff(w, got); diff != "" {
		t.Errorf("%s: options on %s (-want +got):\n%s", c.kind.name, ev.reason, diff)
	}
}

// newOptions reads the new_* variables dhclient and dhcpcd both set.
func newOptions(env map[string]string) map[string]string {
	return map[string]string{
		"ip": env["new_ip_address"], "mask": env["new_subnet_mask"], "broadcast": env["new_broadcast_address"],
		"router": words(env["new_routers"]), "dns": words(env["new_domain_name_servers"]), "domain": env["new_domain_name"],
		"search": words(env["new_domain_search"]), "hostname": env["new_host_name"], "mtu": env["new_interface_mtu"],
		"lease": env["new_dhcp_lease_time"], "t1": env["new_dhcp_renewal_time"], "t2": env["new_dhcp_rebinding_time"],
		"serverid": env["new_dhcp_server_identifier"],
	}
}

// words normalizes a list: single spaces, no quotes, no trailing dots on
// domain names.
func words(s string) string {
	f := strings.Fields(strings.Trim(s, `'"`))
	for i := range f {
		f[i] = strings.TrimSuffix(f[i], ".")
	}
	return strings.Join(f, " ")
}

// rfc3442 decodes dhclient's byte list of option 121 ("0 10 250 40 1",
// RFC 3442 §3) into "dst/len router" pairs.
func rfc3442(s string) string {
	var b []byte
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return "unparsable: " + s
		}
		b = append(b, byte(n))
	}
	var out []string
	for len(b) > 0 {
		bits := int(b[0])
		n := (bits + 7) / 8
		if bits > 32 || len(b) < 1+n+4 {
			return "truncated: " + s
		}
		var dst [4]byte
		copy(dst[:], b[1:1+n])
		r := b[1+n : 1+n+4]
		out = append(out, fmt.Sprintf("%d.%d.%d.%d/%d %d.%d.%d.%d", dst[0], dst[1], dst[2], dst[3], bits, r[0], r[1], r[2], r[3]))
		b = b[1+n+4:]
	}
	return strings.Join(out, " ")
}

// TestDHCPClients runs busybox udhcpc, ISC dhclient and dhcpcd, each on a
// bridge port with the MAC of its own reservation made through the CNI
// plugin, against vmlaned's DHCP server. Each binds the reserved address
// and sees, in its script's environment, every option vmlaned serves.
// vmlaned is then SIGKILLed and restarted mid-lease: the lease file keeps
// every binding, and each client's renewal gets an ACK (never a NAK) with
// the same address and options, and moves the lease's expiry forward.
// Last, each client's release turns its lease back to reserved, with the
// pod's attachment kept.
func TestDHCPClients(t *testing.T) {
	t.Parallel()
	privtest.Require(t, "ip", "iptables", "nsenter")
	bin := buildBinaries(t)
	d := startStandalone(t, bin, netnstest.New(t, "node"), "10.250.40.0/24", "--mtu", "1400", "--lease-time", "1m",
		"--dns", "10.96.0.10,10.96.0.11", "--search", "default.svc.cluster.local,svc.cluster.local",
		"--domain", "cluster.local", "--log-level", "debug")
	want := map[string]string{
		"mask": "255.255.255.0", "broadcast": "10.250.40.255", "router": "10.250.40.1", "serverid": "10.250.40.1",
		"dns": "10.96.0.10 10.96.0.11", "domain": "cluster.local", "search": "default.svc.cluster.local svc.cluster.local",
		"mtu": "1400", "lease": "60", "t1": "30", "t2": "52", "routes": "0.0.0.0/0 10.250.40.1",
	}
	var clients []*client
	for _, k := range []*clientKind{udhcpc, dhclient, dhcpcd} {
		c := newClient(t, d, k, k.name)
		c.start(t, false)
		clients = append(clients, c)
	}
	each := phases(t, clients)

	each("bind", func(t *testing.T, c *client) {
		c.checkOptions(t, c.waitEvent(t, c.kind.bound, 0), want)
		// A CNI reservation's bind is written just after its ACK
		// (dhcp.LateBindDelay), so wait for it.
		l := c.waitLease(t, d, "bound", func(l leases.Lease) bool { return l.State == leases.StateBound })
		if l.State != leases.StateBound || l.MAC != c.mac || l.Source != leases.SourceCNI || l.ContainerID != c.cid ||
			l.Pod.Name != c.pod || l.Hostname != c.pod || !within(l.Expires, time.Now().Add(time.Minute), 10*time.Second) {
			t.Errorf("lease after bind: %+v, want bound to %s for a minute, attachment %s, pod and hostname %s", l, c.mac, c.cid, c.pod)
		}
	})

	t.Run("restart", func(t *testing.T) {
		d.kill()
		before, err := leases.Read(d.leaseFile)
		if err != nil {
			t.Fatal(err)
		}
		d.start(t)
		after, err := leases.Read(d.leaseFile)
		if err != nil {
			t.Fatal(err)
		}
		// dhclient renews every few seconds, so an expiry may have moved
		// forward since; nothing else may change.
		if diff := cmp.Diff(before.Leases(), after.Leases(), cmpopts.IgnoreFields(leases.Lease{}, "Expires"), cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})); diff != "" {
			t.Errorf("leases across a restart (-before +after):\n%s", diff)
		}
		for _, c := range clients {
			b, _ := before.ByIP(mustAddr(t, c.ip))
			a, _ := after.ByIP(mustAddr(t, c.ip))
			if b.State != leases.StateBound || a.State != leases.StateBound || a.Expires.Before(b.Expires) ||
				(c.kind.renew != nil && !a.Expires.Equal(b.Expires)) {
				t.Errorf("%s: lease before the restart %+v, after %+v; want bound in both, the same expiry (later for dhclient)", c.kind.name, b, a)
			}
		}
	})

	each("renew", func(t *testing.T, c *client) {
		old := c.lease(t, d)
		// Expiries have whole seconds: renew at least a second after the
		// bind, so that the new one is later.
		time.Sleep(time.Until(old.Expires.Add(-59*time.Second + 100*time.Millisecond)))
		mark := c.last()
		if c.kind.renew != nil {
			c.kind.renew(t, c)
		}
		c.checkOptions(t, c.waitEvent(t, c.kind.renewed, mark), want)
		l := c.waitLease(t, d, "renewed", func(l leases.Lease) bool { return l.Expires.After(old.Expires) })
		if l.State != leases.StateBound || l.MAC != c.mac {
			t.Errorf("lease after renew: %+v, want bound to %s", l, c.mac)
		}
		for _, r := range c.reasons(0) {
			if slices.Contains(c.kind.failed, r) {
				t.Errorf("the script saw %s; every reason: %v", r, c.reasons(0))
			}
		}
	})
	if strings.Contains(d.logs.String(), "msg=NAK") {
		t.Errorf("vmlaned sent a NAK")
	}

	each("release", func(t *testing.T, c *client) {
		mark := c.last()
		c.kind.release(t, c)
		c.waitEvent(t, c.kind.released, mark)
		l := c.waitLease(t, d, "reserved", func(l leases.Lease) bool { return l.State == leases.StateReserved })
		if !l.Expires.IsZero() || l.MAC != c.mac || l.Source != leases.SourceCNI || l.ContainerID != c.cid || l.IfName != "eth0" || l.Pod.Name != c.pod {
			t.Errorf("lease after release: %+v, want reserved for %s without expiry, attachment %s/eth0 and pod %s kept", l, c.mac, c.cid, c.pod)
		}
	})
}

// TestDHCPClientsDecline makes another host on the bridge hold a pod's
// reserved address before the pod's VM asks for it. udhcpc (-a) and dhcpcd
// ARP-probe the address they are given (RFC 5227), find it in use, never
// bind it, and send DHCPDECLINE (ISC dhclient does not probe on Linux).
// vmlaned quarantines the address for 10 minutes and logs the conflict as
// an error naming the pod: the VM cannot take another address, since its
// address is the pod IP. The lease keeps its MAC and the pod's attachment,
// so CNI DEL still frees it, and a lookup by MAC no longer returns it.
func TestDHCPClientsDecline(t *testing.T) {
	t.Parallel()
	privtest.Require(t, "ip", "iptables")
	bin := buildBinaries(t)
	d := startStandalone(t, bin, netnstest.New(t, "node"), "10.250.41.0/24", "--lease-time", "1m")
	for i, k := range []*clientKind{udhcpc, dhcpcd} {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, d, k, "d"+k.name)
			squatter := bridgePort(t, d.node, "sq"+k.name, "vs-"+k.name, fmt.Sprintf("02:00:00:00:00:%02x", i+1))
			squatter.MustRun(t, "ip", "addr", "add", c.ip+"/24", "dev", "eth0")
			start := time.Now()
			c.start(t, true)
			l := c.waitLease(t, d, "declined", func(l leases.Lease) bool { return l.State == leases.StateDeclined })
			if l.MAC != c.mac || l.Source != leases.SourceCNI || l.ContainerID != c.cid || l.Pod.Name != c.pod ||
				!within(l.Expires, start.Add(10*time.Minute), 30*time.Second) {
				t.Errorf("declined lease %+v: want MAC %s, attachment %s and pod %s kept, quarantined for 10 minutes", l, c.mac, c.cid, c.pod)
			}
			if snap, err := leases.Read(d.leaseFile); err != nil {
				t.Fatal(err)
			} else if got, ok := snap.ByMAC(c.mac); ok {
				t.Errorf("ByMAC(%s) after the decline = %+v; want nothing", c.mac, got)
			}
			if slices.Contains(c.reasons(0), k.bound) {
				t.Errorf("%s bound an address in use; the script saw %v", k.name, c.reasons(0))
			}
			// The store is written before the error is logged: wait for it.
			d.waitLog(t, "the conflict about "+c.ip+" logged as an error naming pod default/"+c.pod, func(line string) bool {
				return strings.Contains(line, "level=ERROR") && strings.Contains(line, "VM declined its reserved pod address") &&
					strings.Contains(line, " ip="+c.ip+" ") && strings.Contains(line, " pod=default/"+c.pod+" ")
			})
		})
	}
}
