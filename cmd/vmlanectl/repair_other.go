//go:build !linux

package main

import "errors"

func readNode(string) (nodeState, error) {
	return nodeState{}, errors.New("leases repair reads a Linux node's bridge and anti-spoofing table; run it on the node")
}
