// Command demo is `make demo`: a three-node Kubernetes cluster on this
// machine with real nodes (containerd, the kubelet and kube-proxy, each
// node in its own network and mount namespaces; see package e2e/cluster),
// vmlane installed the way a user installs it (`kubectl apply -k` of the
// manifests, with the image `make image` built), and pods made with
// kubectl: two plain pods and one VM pod per node, the VMs getting their
// pod IPs by DHCP. It prints an account of it: the nodes, the pods with
// their IPs, routes, leases, and a ping matrix. It then tears everything
// down, or, with -keep, leaves the cluster running in the background and
// prints how to look inside and how to tear it down.
//
// With -hybrid (`make demo-hybrid`) it builds the hybrid cluster instead
// (cluster.NewHybrid): flannel on two nodes with vmlane's routes-only
// DaemonSet beside it, and two VM nodes, one of them a Mac stand-in
// without kube-proxy. Its account shows what runs each node's pod
// network, every node's routes, what the VMs reached from inside, and
// the ping matrix between flannel pods, vmlane pods and VMs.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vmlane/vmlane/e2e/cluster"
)

// childEnv marks the background process of -keep.
const childEnv = "VMLANE_DEMO_CHILD"

// readyMarker ends the account in the background process's log.
const readyMarker = "VMLANE-DEMO-READY"

func main() {
	bin := flag.String("bin", "bin", "folder with vmlane, vmlaned and vmlanectl")
	overlay := flag.String("overlay", "e2e/overlay", "the kustomization to apply: manifests/ with the image built here")
	images := flag.String("images", ".cache/images", "folder with vmlane.tar, pause.tar and busybox.tar (make image)")
	cniBin := flag.String("cni-bin", "", "folder with the loopback CNI plugin (make cni-reference)")
	state := flag.String("state", ".cache/demo", "where -keep keeps its pid and log")
	keep := flag.Bool("keep", false, "leave the cluster running in the background")
	hybrid := flag.Bool("hybrid", false, "the hybrid cluster: flannel beside vmlane (-overlay e2e/overlay-hybrid, -flannel)")
	flannel := flag.String("flannel", "", "with -hybrid: the folder with flanneld (make flannel)")
	coredns := flag.String("coredns", "", "the folder with CoreDNS's image (make coredns): the cluster's DNS")
	flag.Parse()
	if *hybrid && *flannel == "" {
		fatal(errors.New("-hybrid needs -flannel: the folder `bash internal/testing/realnode/build-flannel.sh --print-dir .cache/flannel` prints"))
	}
	for _, p := range []*string{bin, overlay, images, cniBin, state, flannel, coredns} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			fatal(err)
		}
		*p = abs
	}
	o := cluster.Options{
		BinDir:    *bin,
		Overlay:   *overlay,
		Images:    []string{filepath.Join(*images, "vmlane.tar"), filepath.Join(*images, "pause.tar"), filepath.Join(*images, "busybox.tar")},
		CNIBinDir: *cniBin,
		RealNodes: cluster.DefaultRealNodes(3),
		Log:       os.Stdout,
		// The cluster DNS, as every user's cluster has.
		CoreDNSDir: *coredns,
	}
	build := buildPlain
	if *hybrid {
		o.RealNodes, o.FlannelDir = nil, *flannel
		build = buildHybrid
	}
	switch {
	case *keep && os.Getenv(childEnv) == "":
		os.Exit(startBackground(*state))
	default:
		os.Exit(run(o, build, *keep))
	}
}

// account is a built demo cluster: what run prints, and what it checks.
type account struct {
	c *cluster.Cluster
	// report prints the account; failures are its failed checks; done
	// is the closing line when there are none.
	report   func(w io.Writer)
	failures func() []string
	done     string
}

// buildPlain is `make demo`: three vmlane nodes, a VM on each, and both
// families' matrices.
func buildPlain(r *cluster.Runner, o cluster.Options) account {
	fmt.Println("Building a three-node Kubernetes cluster on this machine: real nodes (containerd, kubelet,")
	fmt.Println("kube-proxy) in their own namespaces; vmlane goes on with `kubectl apply -k`, pods with kubectl.")
	c := cluster.NewReal(r, o)
	a := account{c: c}
	c.WaitNetwork(r)
	if o.CoreDNSDir != "" {
		c.WaitClusterDNS(r)
	}
	web := c.DeployWeb(r)
	var vms []cluster.KubePod
	for _, n := range c.RealNodes {
		vms = append(vms, c.StartVMPod(r, "vm-"+strings.TrimPrefix(n.Name, "node-"), n.Name, cluster.VMGuest{}))
	}
	for _, vm := range vms {
		got := c.WaitGuest(r, vm.Name)
		log, _ := c.Kubectl("logs", vm.Name)
		got6, _ := cluster.GuestAddr6(log)
		fmt.Printf("• %s: kubectl shows pod IPs %s and %s; its guest got %s by DHCP and %s by DHCPv6\n", vm.Name, vm.IP, vm.IP6, got, got6)
		if got != vm.IP || got6 != vm.IP6 {
			r.Fatalf("%s: the guest's addresses %s, %s are not the pod IPs %s, %s", vm.Name, got, got6, vm.IP, vm.IP6)
		}
	}
	vms = append(vms, moveVM(r, c, "web-vm", "node-a", "node-b"))
	// Each family's matrix: plain pods (one a node) to every VM and
	// plain pod.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var ms []*cluster.Matrix
	for _, ep := range []func(cluster.KubePod) cluster.Endpoint{c.Endpoint, c.Endpoint6} {
		var srcs, dsts []cluster.Endpoint
		for _, n := range c.RealNodes {
			srcs = append(srcs, ep(web[n.Name][0]))
		}
		for _, vm := range vms {
			dsts = append(dsts, ep(vm))
		}
		dsts = append(dsts, srcs...)
		ms = append(ms, cluster.EndpointMatrix(ctx, srcs, dsts, 3))
	}
	a.report = func(w io.Writer) { c.RealReport(w, ms...) }
	a.failures = func() []string { return failures(ms) }
	a.done = fmt.Sprintf("All %d pod pairs reach each other by pod IP, IPv4 and IPv6, across nodes, without NAT", ms[0].Pairs())
	return a
}

// moveVM shows VM identity: a pod of VM default/vm (annotated
// vmlane.io/vm) on node from, deleted and made again on node to, whose
// guest gets the same addresses there; every other node routes them to
// to. It returns the VM's pod on to.
func moveVM(r *cluster.Runner, c *cluster.Cluster, vm, from, to string) cluster.KubePod {
	first := c.StartVMPod(r, vm+"-1", from, cluster.VMGuest{VM: vm})
	c.WaitGuest(r, first.Name)
	fmt.Printf("• VM default/%s (pod %s, annotated vmlane.io/vm: %s) on %s: %s and %s\n", vm, first.Name, vm, from, first.IP, first.IP6)
	if out, err := c.Kubectl("delete", "pod", first.Name, "--wait=true", "--timeout=90s"); err != nil {
		r.Fatalf("deleting %s: %v\n%s", first.Name, err, out)
	}
	start := time.Now()
	second := c.StartVMPod(r, vm+"-2", to, cluster.VMGuest{VM: vm})
	got := c.WaitGuest(r, second.Name)
	log, _ := c.Kubectl("logs", second.Name)
	got6, _ := cluster.GuestAddr6(log)
	if got != first.IP || got6 != first.IP6 {
		r.Fatalf("VM default/%s on %s: its guest got %s and %s, not its addresses %s and %s", vm, to, got, got6, first.IP, first.IP6)
	}
	var via string
	for _, n := range c.RealNodes {
		if n.Name == to {
			via = n.IP.String()
		}
	}
	for _, n := range c.RealNodes {
		if n.Name == to {
			continue
		}
		cluster.WaitFor(r, time.Minute, n.Name+" routes "+got.String()+" via "+to, func() (bool, string) {
			return strings.Contains(n.Routes(), got.String()+" via "+via), n.Routes()
		})
	}
	claim, _ := c.Kubectl("get", "vmclaim", vm, "-o", "jsonpath={.status.ipv4} {.status.ipv6} {.status.mac} on {.status.node}")
	fmt.Printf("• its pod deleted and made again on %s (%s): the guest got %s by DHCP and %s by DHCPv6 there, the\n"+
		"  other nodes route them via %s, %s after the pod was made; kubectl get vmclaim %s: %s\n",
		to, second.Name, got, got6, to, time.Since(start).Round(time.Second), vm, claim)
	return second
}

// buildHybrid is `make demo-hybrid`: flannel's nodes and vmlane's VM
// nodes in one cluster.
func buildHybrid(r *cluster.Runner, o cluster.Options) account {
	fmt.Println("Building a hybrid Kubernetes cluster on this machine: two nodes whose CNI is flannel (vxlan),")
	fmt.Println("with vmlane's routes-only DaemonSet beside it, and two VM nodes labelled vmlane.io/vm-node=true,")
	fmt.Println("one of them a stand-in for a Mac (no kube-proxy). Real nodes (containerd, kubelet) in namespaces.")
	h := cluster.NewHybrid(r, o)
	for _, name := range cluster.HybridVMs {
		vm := h.VMs[name]
		got := h.WaitGuest(r, name)
		log, _ := h.Kubectl("logs", name)
		got6, _ := cluster.GuestAddr6(log)
		fmt.Printf("• %s on %s: kubectl shows pod IPs %s and %s; its guest got %s by DHCP and %s by DHCPv6\n", name, vm.Node, vm.IP, vm.IP6, got, got6)
		if got != vm.IP || got6 != vm.IP6 {
			r.Fatalf("%s: the guest's addresses %s, %s are not the pod IPs %s, %s", name, got, got6, vm.IP, vm.IP6)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ms := h.HybridMatrices(ctx)
	return account{
		c:        h.Cluster,
		report:   func(w io.Writer) { h.Report(w, ms...) },
		failures: func() []string { return append(failures(ms), h.GuestFailures()...) },
		done: fmt.Sprintf("All %d pairs of flannel pods, vmlane pods and VMs reach each other by pod IP, IPv4 and IPv6, without NAT,\n"+
			"and the VM on the node without kube-proxy reached Service web through its Service gateway", ms[0].Pairs()),
	}
}

// failures are every matrix's failed checks.
func failures(ms []*cluster.Matrix) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Failures()...)
	}
	return out
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "demo:", err)
	os.Exit(1)
}

// run builds the cluster with build, prints the account and, when held,
// waits for SIGTERM or SIGINT before tearing down.
func run(o cluster.Options, build func(*cluster.Runner, cluster.Options) account, hold bool) int {
	start := time.Now()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	r := cluster.NewRunner(context.Background(), "demo", os.Stderr)
	interrupted := make(chan struct{})
	go func() {
		<-sig
		close(interrupted)
		fmt.Fprintln(os.Stderr, "demo: tearing down")
		r.Close()
		os.Exit(0)
	}()
	var a account
	err := r.Run(func() { a = build(r, o) })
	if a.report != nil {
		a.report(os.Stdout)
	}
	code := 0
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		code = 1
	} else if f := a.failures(); len(f) > 0 {
		fmt.Fprintf(os.Stderr, "\ndemo: %d checks failed:\n  %s\n", len(f), strings.Join(f, "\n  "))
		code = 1
	} else {
		fmt.Printf("\n%s (%s).\n", a.done, time.Since(start).Round(time.Second))
	}
	if hold && code == 0 {
		c := a.c
		fmt.Println("\nThe cluster stays up. kubectl:")
		fmt.Printf("    ip netns exec %s %s --kubeconfig %s get pods -A -o wide\n", c.CP.NetNS, c.KubectlPath, c.CP.Kubeconfig)
		fmt.Println("A shell on a node (its network and its own /etc, /opt, /var/lib):")
		for _, n := range c.RealNodes {
			fmt.Printf("    %s    # %s\n", n.Shell(), n.Name)
		}
		fmt.Println("Tear it down with:\n    make demo-down")
		fmt.Println(readyMarker)
		<-interrupted
		select {} // the signal goroutine exits the process
	}
	signal.Stop(sig)
	r.Close()
	return code
}

// startBackground re-runs the demo as a background process in its own
// session, logging to state/demo.log, echoes that log until the account
// is complete, and leaves the process running; `make demo-down` (SIGTERM
// to state/demo.pid) tears it down.
func startBackground(state string) int {
	if err := os.MkdirAll(state, 0o755); err != nil {
		fatal(err)
	}
	pidFile := filepath.Join(state, "demo.pid")
	if pid, err := readPid(pidFile); err == nil && syscall.Kill(pid, 0) == nil {
		fatal(fmt.Errorf("a demo is already running (pid %d): `make demo-down` first", pid))
	}
	logPath := filepath.Join(state, "demo.log")
	log, err := os.Create(logPath)
	if err != nil {
		fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fatal(err)
	}
	log.Close()
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Echo the log as it grows until the marker or the child's exit.
	f, err := os.Open(logPath)
	if err != nil {
		fatal(err)
	}
	defer f.Close()
	rd := bufio.NewReader(f)
	for {
		line, err := rd.ReadString('\n')
		if strings.TrimSpace(line) == readyMarker {
			fmt.Printf("(the demo runs on as pid %d; its log: %s)\n", cmd.Process.Pid, logPath)
			return 0
		}
		fmt.Print(line)
		if errors.Is(err, io.EOF) {
			select {
			case werr := <-exited:
				rest, _ := io.ReadAll(rd)
				fmt.Print(string(rest))
				os.Remove(pidFile)
				fmt.Fprintf(os.Stderr, "demo: the background demo ended: %v\n", werr)
				return 1
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
