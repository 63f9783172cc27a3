//go:build e2e

package crosssubnet

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/e2e/cluster"
	"github.com/vmlane/vmlane/internal/testing/birdtest"
	"github.com/vmlane/vmlane/routes"
	"github.com/vmlane/vmlane/routes/bgp"
)

// The fabric: bird on the router, AS 64512; node-a and node-b in AS 64513
// peer over IPv4 (--bgp-asn, --bgp-peer), node-b with an MD5 password
// (--bgp-password-file); node-c, on the far subnet, in AS 64514, peers over
// IPv6, both set by its Node's annotations. The kernel protocols put what
// bird learns in the router's table, which is all the router knows of pods.
const birdConf = `
log "@LOG@" all;
router id 10.99.0.253;
protocol device { scan time 10; }
protocol kernel k4 { ipv4 { import none; export all; }; }
protocol kernel k6 { ipv6 { import none; export all; }; }
template bgp node {
	local as 64512;
	graceful restart on;
	ipv4 { import all; export none; };
	ipv6 { import all; export none; };
}
protocol bgp node_a from node { neighbor 10.99.0.11 as 64513; }
protocol bgp node_b from node { neighbor 10.99.0.12 as 64513; password "vmlane-e2e-md5"; }
protocol bgp node_c from node { neighbor fd98::13 as 64514; }
`

// TestBGP runs the nodes with --cross-subnet=bgp against bird on the
// router.
func TestBGP(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "bgp-password")
	if err := os.WriteFile(pw, []byte("vmlane-e2e-md5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.MustKubectl(t, "annotate", "--overwrite", "node", "node-c", bgp.AnnotationASN+"=64514", bgp.AnnotationPeers+"=[fd98::1]:64512")
	bird := birdtest.Start(t, c.Router, birdConf)
	flags := []string{"--bgp-asn", "64513", "--bgp-peer", "10.99.0.253:64512"}
	useMode(t, "bgp", map[string][]string{"node-a": flags, "node-b": append(flags, "--bgp-password-file", pw), "node-c": flags})
	a, cn := c.Node("node-a"), c.Node("node-c")
	for _, p := range []string{"node_a", "node_b", "node_c"} {
		cluster.Eventually(t, "bird's session with "+p, func() (bool, string) {
			out, _ := bird.Birdc("show", "protocols", p)
			return strings.Contains(out, "Established"), out
		})
	}

	t.Run("RouterLearnsEachPodSubnetFromItsNode", func(t *testing.T) {
		for _, n := range c.Nodes {
			proto := "node_" + n.Name[len(n.Name)-1:]
			for _, p := range n.PodCIDRs() {
				cluster.Eventually(t, "bird to learn "+p.String()+" from "+proto, func() (bool, string) {
					out, _ := bird.Birdc("show", "route", "for", p.String(), "all")
					return strings.Contains(out, p.String()) && strings.Contains(out, "["+proto+" ") && strings.Contains(out, "BGP.next_hop"), out
				})
			}
		}
		kernel := c.Router.MustRun(t, "ip", "route", "show", cn.PodCIDR.String())
		if want := cn.PodCIDR.String() + " via " + cn.IP.String(); !strings.Contains(kernel, want) {
			t.Errorf("router's kernel route to node-c's pods: %q, want %q", kernel, want)
		}
		// vmlaned installs nothing it hears (bird exports none), and
		// leaves the far node to the fabric, without an Event.
		if r := a.Routes(); strings.Contains(r, cn.PodCIDR.String()) || strings.Contains(r, routes.DefaultVXLANDevice) {
			t.Errorf("node-a routes node-c's pods itself in bgp mode:\n%s", r)
		}
		if _, err := a.NS.Run("ip", "link", "show", routes.DefaultVXLANDevice); err == nil {
			t.Error("node-a kept the VXLAN device of vxlan mode")
		}
	})

	t.Run("PodsAndVMsReachEachOtherWithoutNAT", func(t *testing.T) {
		reachEachOther(t, []*cluster.Pod{a1, b1, c1, cv}, [][2]*cluster.Pod{{a1, c1}, {c1, a1}, {cv, b1}, {b1, cv}})
	})

	// SIGKILL of node-a's vmlaned: bird keeps node-a's routes (graceful
	// restart), and a ping every 10 ms from node-c's pod to node-a's, over
	// the kill and the restart, loses nothing.
	t.Run("SIGKILLAndRestartLoseNoPing", func(t *testing.T) {
		ping := c1.NS.Command("ping", "-q", "-i", "0.01", "-c", "800", "-W", "1", a1.IP.String())
		out := &strings.Builder{}
		ping.Stdout, ping.Stderr = out, out
		if err := ping.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		a.Daemon().Kill()
		cluster.Eventually(t, "bird to see node_a's session go", func() (bool, string) {
			o, _ := bird.Birdc("show", "protocols", "node_a")
			return !strings.Contains(o, "Established"), o
		})
		kept, _ := bird.Birdc("show", "route", "for", a.PodCIDR.String(), "all")
		if !strings.Contains(kept, a.PodCIDR.String()) {
			t.Errorf("bird dropped node-a's routes when vmlaned died:\n%s", kept)
		}
		if k := c.Router.MustRun(t, "ip", "route", "show", a.PodCIDR.String()); !strings.Contains(k, "via "+a.IP.String()) {
			t.Errorf("the router's kernel lost node-a's route: %q", k)
		}
		time.Sleep(time.Second)
		a.StartDaemon(suite)
		cluster.Eventually(t, "node_a's session back", func() (bool, string) {
			o, _ := bird.Birdc("show", "protocols", "node_a")
			return strings.Contains(o, "Established"), o
		})
		if err := ping.Wait(); err != nil {
			t.Errorf("ping over the restart: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindStringSubmatch(out.String())
		if m == nil || m[1] != m[2] {
			t.Errorf("ping lost packets over vmlaned's SIGKILL and restart:\n%s", out)
		}
		t.Logf("over the SIGKILL and restart: %s", strings.TrimSpace(out.String()))
		// The restarted speaker's routes are fresh: nothing stale left.
		cluster.Eventually(t, "node-a's routes fresh in bird", func() (bool, string) {
			o, _ := bird.Birdc("show", "route", "for", a.PodCIDR.String(), "all")
			return strings.Contains(o, "[node_a ") && !strings.Contains(strings.ToLower(o), "stale"), o
		})
	})

	// A VM of node-a live-migrates to node-c, on the far subnet, and
	// back: while it runs on node-c, bird has its /32 and /128 from
	// node_c, and once it is home again neither, the routers routing it
	// by node-a's pod subnets.
	t.Run("VMLiveMigratesAcrossSubnets", func(t *testing.T) {
		vantages := []vantage{{"node-a", a1.NS}, {"node-b", b1.NS}, {"node-c", c1.NS}, {"router", c.Router}}
		crossMigration(t, "xbgp", vantages, func(t *testing.T, on *cluster.Node, p *cluster.Pod) {
			for _, prefix := range []string{p.IP.String() + "/32", p.IP6.String() + "/128"} {
				cluster.Eventually(t, "bird's route to "+prefix+" with the VM on "+on.Name, func() (bool, string) {
					out, _ := bird.Birdc("show", "route", prefix, "all")
					if on == cn {
						return strings.Contains(out, prefix) && strings.Contains(out, "[node_c "), out
					}
					return !strings.Contains(out, prefix), out
				})
			}
		})
	})

	// bird takes node_b's session down and up: node-b's vmlaned logs it,
	// raises an Event and counts the flap.
	t.Run("SessionFlapIsLoggedCountedAndEvented", func(t *testing.T) {
		b := c.Node("node-b")
		bird.Birdc("disable", "node_b")
		b.Daemon().WaitLog(t, "BGP session with 10.99.0.253 (AS 64512) went down")
		bird.Birdc("enable", "node_b")
		cluster.Eventually(t, "node_b's session back", func() (bool, string) {
			o, _ := bird.Birdc("show", "protocols", "node_b")
			return strings.Contains(o, "Established"), o
		})
		metric := `vmlane_bgp_session_flaps_total{peer="10.99.0.253"}`
		cluster.Eventually(t, "the flap counted", func() (bool, string) {
			m, err := cluster.Metrics(b.NS)
			return err == nil && m[metric] >= 1, fmt.Sprintf("%s %v (%v)", metric, m[metric], err)
		})
		cluster.Eventually(t, "the Event", func() (bool, string) {
			out, _ := c.Kubectl("get", "events", "-A", "--field-selector", "reason=VmlaneBGPSessionDown", "-o", "name")
			return strings.TrimSpace(out) != "", out
		})
	})
}
