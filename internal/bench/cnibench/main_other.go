//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "cnibench: linux only (it needs network namespaces)")
	os.Exit(1)
}
