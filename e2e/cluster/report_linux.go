package cluster

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// Endpoint is a pod as the ping matrix sees it: a name, an address and,
// for a pod that can be a source, how to ping and fetch from inside it.
type Endpoint struct {
	Name string
	IP   netip.Addr
	// Ping and WhoAmI run inside the pod; nil for a pod that is only a
	// destination.
	Ping   func(ctx context.Context, target netip.Addr, count int) (PingResult, error)
	WhoAmI func(ctx context.Context, target netip.Addr) (string, error)
}

// Endpoint is p as a source and destination of the matrix.
func (p *Pod) Endpoint() Endpoint {
	return Endpoint{Name: p.Name, IP: p.IP, Ping: p.Ping, WhoAmI: p.WhoAmI}
}

// Endpoint6 is p by its IPv6 address.
func (p *Pod) Endpoint6() Endpoint {
	return Endpoint{Name: p.Name, IP: p.IP6, Ping: p.Ping, WhoAmI: p.WhoAmI}
}

// Matrix is the outcome of every source pinging every destination.
type Matrix struct {
	Srcs, Dsts []Endpoint
	// Cells[i][j] is Srcs[i] → Dsts[j]; a pod's own cell is empty.
	Cells [][]Cell
}

// Cell is one source → destination check.
type Cell struct {
	Ping PingResult
	Err  error
	// Seen is the source address the destination's /cgi-bin/whoami saw.
	Seen string
}

// OK reports whether the ping got every reply and the destination saw the
// source's own pod IP (no NAT between pods).
func (c Cell) OK(src Endpoint) bool {
	return c.Err == nil && c.Ping.OK && c.Ping.Recv == c.Ping.Sent && c.Seen == src.IP.String()
}

// PingMatrix has every pod ping every other pod (count echo requests) and
// fetch its whoami, sources in parallel, each source's checks in turn.
func PingMatrix(ctx context.Context, pods []*Pod, count int) *Matrix {
	var eps []Endpoint
	for _, p := range pods {
		eps = append(eps, p.Endpoint())
	}
	return EndpointMatrix(ctx, eps, eps, count)
}

// PingMatrix6 is PingMatrix by the pods' IPv6 addresses.
func PingMatrix6(ctx context.Context, pods []*Pod, count int) *Matrix {
	var eps []Endpoint
	for _, p := range pods {
		eps = append(eps, p.Endpoint6())
	}
	return EndpointMatrix(ctx, eps, eps, count)
}

// EndpointMatrix is PingMatrix from srcs to dsts.
func EndpointMatrix(ctx context.Context, srcs, dsts []Endpoint, count int) *Matrix {
	m := &Matrix{Srcs: srcs, Dsts: dsts, Cells: make([][]Cell, len(srcs))}
	var wg sync.WaitGroup
	for i, src := range srcs {
		m.Cells[i] = make([]Cell, len(dsts))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j, dst := range dsts {
				if src.Name == dst.Name {
					continue
				}
				c := &m.Cells[i][j]
				c.Ping, c.Err = src.Ping(ctx, dst.IP, count)
				if c.Err == nil {
					c.Seen, c.Err = src.WhoAmI(ctx, dst.IP)
				}
			}
		}()
	}
	wg.Wait()
	return m
}

// Pairs is the number of source → destination checks.
func (m *Matrix) Pairs() int {
	n := 0
	for _, src := range m.Srcs {
		for _, dst := range m.Dsts {
			if src.Name != dst.Name {
				n++
			}
		}
	}
	return n
}

// Failures lists the cells that are not OK, one line each.
func (m *Matrix) Failures() []string {
	var out []string
	for i, src := range m.Srcs {
		for j, dst := range m.Dsts {
			if src.Name == dst.Name || m.Cells[i][j].OK(src) {
				continue
			}
			c := m.Cells[i][j]
			out = append(out, fmt.Sprintf("%s (%s) → %s (%s): ping %+v, seen as %q, err %v", src.Name, src.IP, dst.Name, dst.IP, c.Ping, c.Seen, c.Err))
		}
	}
	return out
}

// Write prints the matrix: average round trip per pair, and "NAT" or
// "FAIL" where the check failed.
func (m *Matrix) Write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "from \\ to\t")
	for _, p := range m.Dsts {
		fmt.Fprintf(tw, "%s\t", p.Name)
	}
	fmt.Fprintln(tw)
	for i, src := range m.Srcs {
		fmt.Fprintf(tw, "%s (%s)\t", src.Name, src.IP)
		for j, dst := range m.Dsts {
			c := m.Cells[i][j]
			switch {
			case src.Name == dst.Name:
				fmt.Fprint(tw, "-\t")
			case c.OK(src):
				fmt.Fprintf(tw, "%.2f ms\t", float64(c.Ping.RTT)/float64(time.Millisecond))
			case c.Err == nil && c.Ping.OK && c.Seen != src.IP.String():
				fmt.Fprintf(tw, "NAT(%s)\t", c.Seen)
			default:
				fmt.Fprint(tw, "FAIL\t")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// section writes a report's section heading.
func section(w io.Writer) func(title string) {
	return func(title string) {
		fmt.Fprintf(w, "\n── %s %s\n", title, strings.Repeat("─", max(0, 60-len(title))))
	}
}

// reportNode is what a report shows of one node: its vmlane routes and
// its lease file (path on this host; shown, as the node sees it).
type reportNode struct {
	name, routes, leaseFile, shown string
}

// writeRoutesAndLeases writes each node's vmlane routes, then each node's
// lease table as `vmlanectl leases list` prints it.
func (c *Cluster) writeRoutesAndLeases(w io.Writer, section func(string), nodes []reportNode) {
	indent := func(text string) {
		for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	section("Routes vmlane installed (ip route show proto 77; ip -6 route show proto 77)")
	for _, n := range nodes {
		fmt.Fprintf(w, "%s:\n", n.name)
		indent(n.routes)
	}
	section("Leases (vmlanectl leases list)")
	for _, n := range nodes {
		out, err := exec.Command(filepath.Join(c.Opts.BinDir, "vmlanectl"), "leases", "list", "--lease-file", n.leaseFile).CombinedOutput()
		if err != nil {
			out = append(out, []byte(err.Error())...)
		}
		fmt.Fprintf(w, "%s (%s):\n", n.name, n.shown)
		indent(string(out))
	}
}

// Report writes the demo's account of the cluster: the nodes and their
// podCIDRs as the API server has them, each node's vmlane routes, each
// node's lease table as `vmlanectl leases list` prints it, and the ping
// matrix.
func (c *Cluster) Report(w io.Writer, m *Matrix) {
	section := section(w)
	section("Nodes (kubectl get nodes)")
	out, err := c.Kubectl("get", "nodes", "-o",
		`custom-columns=NAME:.metadata.name,POD-CIDR:.spec.podCIDR,INTERNAL-IP:.status.addresses[?(@.type=="InternalIP")].address,NETWORK-UNAVAILABLE:.status.conditions[?(@.type=="NetworkUnavailable")].status`)
	if err != nil {
		out = err.Error()
	}
	fmt.Fprint(w, out)

	var nodes []reportNode
	for _, n := range c.Nodes {
		routes := n.Routes()
		if r6 := n.Routes6(); r6 != "" {
			routes += "\n" + r6
		}
		nodes = append(nodes, reportNode{n.Name, routes, n.LeaseFile(), n.LeaseFile()})
	}
	c.writeRoutesAndLeases(w, section, nodes)

	if m != nil {
		section("Ping matrix (average RTT of 3 pings from inside each pod)")
		m.Write(w)
		fmt.Fprintln(w, "Every cell also checked /cgi-bin/whoami on the destination: it saw the source's own pod IP (no NAT between pods).")
	}
}

// RealReport is Report for a cluster of real nodes: kubectl's view of the
// nodes and pods, then each node's routes and leases, and the matrices
// (one a family: IPv4, then IPv6).
func (c *Cluster) RealReport(w io.Writer, ms ...*Matrix) {
	section := section(w)
	for _, v := range []struct{ title, what string }{
		{"kubectl get nodes", "nodes"},
		{"kubectl get pods -o wide", "pods"},
		{"kubectl -n vmlane-system get pods -o wide", "pods"},
	} {
		section(v.title)
		args := []string{"get", v.what, "-o", "wide"}
		if strings.Contains(v.title, "vmlane-system") {
			args = append([]string{"-n", "vmlane-system"}, args...)
		}
		out, err := c.Kubectl(args...)
		if err != nil {
			out = err.Error()
		}
		fmt.Fprint(w, out)
	}
	section("Pod CIDRs and addresses of the nodes")
	out, err := c.Kubectl("get", "nodes", "-o", `custom-columns=NAME:.metadata.name,POD-CIDRS:.spec.podCIDRs,INTERNAL-IPS:.status.addresses[?(@.type=="InternalIP")].address`)
	if err != nil {
		out = err.Error()
	}
	fmt.Fprint(w, out)
	var nodes []reportNode
	for _, n := range c.RealNodes {
		routes := n.Routes()
		if r6 := n.Routes6(); r6 != "" {
			routes += "\n" + r6
		}
		nodes = append(nodes, reportNode{n.Name, routes, n.File(leases.DefaultPath), leases.DefaultPath})
	}
	c.writeRoutesAndLeases(w, section, nodes)
	for i, m := range ms {
		if m == nil {
			continue
		}
		family := "IPv4"
		if i == 1 {
			family = "IPv6"
		}
		section("Ping matrix, " + family + " (kubectl exec ping, average RTT of 3, from a plain pod of each node)")
		m.Write(w)
		fmt.Fprintln(w, "Every cell also fetched /cgi-bin/whoami from the destination: it saw the source's own pod IP (no NAT between pods).")
	}
}
