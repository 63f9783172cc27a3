// Command pause is the sandbox ("pause") container of the e2e suite's real
// nodes: it holds the pod's namespaces, reaps the zombies that, as PID 1
// of the pod's PID namespace, it inherits, and exits when told to stop.
// The nodes pin its image under the name containerd expects,
// registry.k8s.io/pause:3.10, because there is no registry to pull from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
