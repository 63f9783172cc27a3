//go:build !linux

// Command demo is `make demo`, a three-node vmlane cluster in Linux network
// namespaces; it runs on Linux only.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "demo: the demo cluster is built from Linux network namespaces; run it on Linux")
	os.Exit(1)
}
