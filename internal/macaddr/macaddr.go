// Package macaddr is the one spelling of a 48-bit MAC address vmlane
// writes (lowercase, colons, two digits an octet: "02:76:0a:f4:03:07"),
// and the one parser every package reads MACs with: the lease store, the
// DHCP server, the plugin's config, vmlanectl, macOS bootpd's lease file
// and vmnet's reservations. It imports the standard library only.
package macaddr

import (
	"fmt"
	"net"
)

// Normalize returns mac in canonical form. It accepts six octets
// separated by ':' or '-' with one or two hex digits each (macOS's
// bootpd and arp(8) strip leading zeros: "2:0:a:f4:3:7"), and anything
// else net.ParseMAC reads as a 48-bit address ("0276.0af4.0307").
func Normalize(mac string) (string, error) {
	if Canonical(mac) {
		return mac, nil
	}
	if b, ok := parseOctets(mac); ok {
		return net.HardwareAddr(b[:]).String(), nil
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return "", fmt.Errorf("invalid MAC %q: %w", mac, err)
	}
	if len(hw) != 6 {
		return "", fmt.Errorf("invalid MAC %q: want 6 octets, got %d", mac, len(hw))
	}
	return hw.String(), nil
}

// Canonical reports whether mac is already in Normalize's form, without
// allocating.
func Canonical(mac string) bool {
	if len(mac) != 17 {
		return false
	}
	for i := 0; i < 17; i++ {
		c := mac[i]
		switch {
		case i%3 == 2:
			if c != ':' {
				return false
			}
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		default:
			return false
		}
	}
	return true
}

// parseOctets reads six octets of one or two hex digits separated by one
// kind of separator, ':' or '-'.
func parseOctets(s string) (b [6]byte, ok bool) {
	var sep byte
	n, digits := 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		case c == ':' || c == '-':
			if sep == 0 {
				sep = c
			}
			if c != sep || digits == 0 || n == 5 {
				return b, false
			}
			n, digits = n+1, 0
			continue
		default:
			return b, false
		}
		if digits == 2 {
			return b, false
		}
		b[n] = b[n]<<4 | v
		digits++
	}
	return b, n == 5 && digits > 0
}
