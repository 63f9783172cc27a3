// Command pause is the sandbox ("pause") container of the e2e suite's real
// nodes: it holds the pod's namespaces, reaps the zombies that, as PID 1
// of the pod's PID namespace, it inherits, and exits 0 when told to stop
// (SIGTERM or SIGINT). The nodes pin its image under the name containerd
// expects, registry.k8s.io/pause:3.10, because there is no registry to
// pull from. Standard library only, built static (CGO_ENABLED=0): the
// image has no other file.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	// Children that ended before Notify sent no signal we saw.
	reap()
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap waits for every child that has exited, without blocking. Signals
// coalesce, so one SIGCHLD may stand for many children.
func reap() (n int) {
	for {
		pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return n
		}
		n++
	}
}
