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
	flag.Parse()
	for _, p := range []*string{bin, overlay, images, cniBin, state} {
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
	}
	switch {
	case *keep && os.Getenv(childEnv) == "":
		os.Exit(startBackground(*state))
	case *keep:
		os.Exit(run(o, true))
	default:
		os.Exit(run(o, false))
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

// run builds the cluster, prints the account and, when held, waits for
// SIGTERM or SIGINT before tearing down.
func run(o cluster.Options, hold bool) int {
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
	var c *cluster.Cluster
	var ms []*cluster.Matrix
	err := r.Run(func() {
		fmt.Println("Building a three-node Kubernetes cluster on this machine: real nodes (containerd, kubelet,")
		fmt.Println("kube-proxy) in their own namespaces; vmlane goes on with `kubectl apply -k`, pods with kubectl.")
		c = cluster.NewReal(r, o)
		c.WaitNetwork(r)
		web := c.DeployWeb(r)
		var vms []cluster.KubePod
		for _, n := range c.RealNodes {
			vms = append(vms, c.StartVMPod(r, "vm-"+strings.TrimPrefix(n.Name, "node-"), n.Name, nil))
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
		// Each family's matrix: plain pods (one a node) to every VM and
		// plain pod.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
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
	})
	if c != nil {
		c.RealReport(os.Stdout, ms...)
	}
	code := 0
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		code = 1
	} else if f := failures(ms); len(f) > 0 {
		fmt.Fprintf(os.Stderr, "\ndemo: %d checks failed:\n  %s\n", len(f), strings.Join(f, "\n  "))
		code = 1
	} else {
		fmt.Printf("\nAll %d pod pairs reach each other by pod IP, IPv4 and IPv6, across nodes, without NAT (%s).\n", ms[0].Pairs(), time.Since(start).Round(time.Second))
	}
	if hold && code == 0 {
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
