// Command demo is `make demo`: a three-node vmlane cluster on this
// machine, out of network namespaces (see package e2e/cluster), with two VM
// pods per node that get their addresses by DHCP, and a short account of
// it: nodes and podCIDRs, routes, leases, and a ping matrix between the
// pods. It then tears everything down, or, with -keep, leaves the cluster
// running in the background and prints how to look inside and how to tear
// it down.
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
	manifests := flag.String("manifests", "manifests", "the kustomize base to apply")
	state := flag.String("state", ".cache/demo", "where -keep keeps its pid and log")
	keep := flag.Bool("keep", false, "leave the cluster running in the background")
	flag.Parse()
	for _, p := range []*string{bin, manifests, state} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			fatal(err)
		}
		*p = abs
	}
	switch {
	case *keep && os.Getenv(childEnv) == "":
		os.Exit(startBackground(*state))
	case *keep:
		os.Exit(run(*bin, *manifests, true))
	default:
		os.Exit(run(*bin, *manifests, false))
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "demo:", err)
	os.Exit(1)
}

// run builds the cluster, prints the account and, when held, waits for
// SIGTERM or SIGINT before tearing down.
func run(bin, manifests string, hold bool) int {
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
	var m *cluster.Matrix
	err := r.Run(func() {
		fmt.Println("Building a three-node vmlane cluster in network namespaces on this machine.")
		c = cluster.New(r, cluster.Options{BinDir: bin, Manifests: manifests, Nodes: cluster.DefaultNodes(3), Log: os.Stdout, VMTimeout: 24 * time.Hour})
		var pods []*cluster.Pod
		for _, n := range c.Nodes {
			for i := 1; i <= 2; i++ {
				name := fmt.Sprintf("vm-%s%d", strings.TrimPrefix(n.Name, "node-"), i)
				fmt.Printf("• VM pod %s on %s: CNI ADD, then a QEMU guest asking for DHCP\n", name, n.Name)
				pods = append(pods, n.AddVMPod(r, name))
			}
		}
		for _, p := range pods {
			p.WaitVM(r)
			fmt.Printf("• %s got %s by DHCP (MAC %s, TAP %s)\n", p.Name, p.IP, p.MAC, p.Tap)
		}
		for _, n := range c.Nodes {
			cluster.Eventually(r, n.Name+" ready", func() (bool, string) {
				ready, why := n.Ready()
				return ready && n.RouteCount() == len(c.Nodes)-1, why
			})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		m = cluster.PingMatrix(ctx, pods, 3)
	})
	if c != nil {
		c.Report(os.Stdout, m)
	}
	code := 0
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		code = 1
	} else if f := m.Failures(); len(f) > 0 {
		fmt.Fprintf(os.Stderr, "\ndemo: %d checks failed:\n  %s\n", len(f), strings.Join(f, "\n  "))
		code = 1
	} else {
		fmt.Printf("\nAll %d pod pairs reach each other by pod IP (%s).\n", len(m.Pods)*(len(m.Pods)-1), time.Since(start).Round(time.Second))
	}
	if hold && code == 0 {
		fmt.Println("\nThe cluster stays up. Look inside a node:")
		for _, n := range c.Nodes {
			fmt.Printf("    ip netns exec %s bash    # %s\n", n.NS.Name, n.Name)
		}
		fmt.Printf("    %s leases list --lease-file %s\n", filepath.Join(bin, "vmlanectl"), c.Nodes[0].LeaseFile())
		fmt.Printf("    ip netns exec %s %s --kubeconfig %s get nodes\n", c.CP.NetNS, c.KubectlPath, c.CP.Kubeconfig)
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
