package main

import (
	"errors"
	"flag"
	"net/netip"

	"github.com/vmlane/vmlane/leases"
)

// The flag values below check their argument in Set, so the flag package's
// own error ("invalid value %q for flag -mac: ...") names both the flag and
// the value, and a bad value is a usage error before any file is read.

// macFlag is a MAC in the lease file's canonical spelling.
type macFlag struct{ mac string }

func (f *macFlag) String() string { return f.mac }

func (f *macFlag) Set(s string) error {
	m, err := leases.NormalizeMAC(s)
	if err != nil {
		// NormalizeMAC's error repeats the value; the flag package adds it.
		return errors.New("not a 48-bit MAC address (want e.g. 02:00:0a:f4:03:07)")
	}
	f.mac = m
	return nil
}

// ipFlag is an address. The zero value means the flag was not given.
type ipFlag struct{ ip netip.Addr }

func (f *ipFlag) String() string {
	if !f.ip.IsValid() {
		return ""
	}
	return f.ip.String()
}

func (f *ipFlag) Set(s string) error {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return errors.New("not an IP address")
	}
	// The lease file holds plain IPv4 addresses; ::ffff:10.0.0.1 is one.
	f.ip = ip.Unmap()
	return nil
}

// outputFlag is -o: how leases are printed.
type outputFlag string

const (
	outputTable outputFlag = "table"
	outputJSON  outputFlag = "json"
)

func (f *outputFlag) String() string { return string(*f) }

func (f *outputFlag) Set(s string) error {
	switch o := outputFlag(s); o {
	case outputTable, outputJSON:
		*f = o
		return nil
	}
	return errors.New("want table or json")
}

// parseInterspersed parses args with fs and returns the positional words,
// letting flags and words come in any order (the flag package alone stops at
// the first word). Everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return words, nil
		}
		// Parse stopped either at a word or just after a "--" it consumed.
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(words, rest...), nil
		}
		words = append(words, rest[0])
		args = rest[1:]
	}
}
