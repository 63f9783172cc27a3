//go:build !linux

// Command netlinkfloor is cnibench's floor plugin; it runs on Linux only.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "netlinkfloor runs on Linux only")
	os.Exit(1)
}
