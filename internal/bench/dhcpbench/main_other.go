//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "dhcpbench: linux only (it needs network namespaces and packet sockets)")
	os.Exit(1)
}
