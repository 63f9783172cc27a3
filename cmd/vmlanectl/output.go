package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// containerIDLen is how much of a container ID the table shows: the short ID
// crictl and docker print.
const containerIDLen = 12

// sortByIP returns ls sorted by IP. A vmlane file already is; bootpd's lists
// the newest lease first. The sort is stable so that, where bootpd lists one
// address twice, the newer entry stays on top.
func sortByIP(ls []leases.Lease) []leases.Lease {
	ls = slices.Clone(ls)
	slices.SortStableFunc(ls, func(a, b leases.Lease) int { return a.IP.Compare(b.IP) })
	return ls
}

// printLeases writes ls in the chosen format. Table output judges expiry by
// now.
func printLeases(w io.Writer, format outputFlag, ls []leases.Lease, now time.Time) error {
	if format == outputJSON {
		if ls == nil {
			ls = []leases.Lease{} // "[]", not "null", for an empty file
		}
		return writeJSON(w, ls)
	}
	return writeTable(w, ls, now)
}

// printLease writes one lease: a one-row table or one JSON object.
func printLease(w io.Writer, format outputFlag, l leases.Lease, now time.Time) error {
	if format == outputJSON {
		return writeJSON(w, l)
	}
	return writeTable(w, []leases.Lease{l}, now)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// Print hostnames as the file holds them, not with \u003c escapes.
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func writeTable(w io.Writer, ls []leases.Lease, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	// A dual-stack node's file gets the IPv6 columns; an IPv4-only one
	// prints as it always has.
	dual := slices.ContainsFunc(ls, func(l leases.Lease) bool { return l.IP6.IsValid() })
	head := "IP\tMAC\tSTATE\tSOURCE\tPOD\tCONTAINER\tIFNAME\tHOSTNAME\tEXPIRES"
	if dual {
		head = "IP\tIP6\tMAC\tSTATE\tSTATE6\tSOURCE\tPOD\tCONTAINER\tIFNAME\tHOSTNAME\tEXPIRES"
	}
	fmt.Fprintln(tw, head)
	for _, l := range ls {
		pod := ""
		if l.Pod.Namespace != "" || l.Pod.Name != "" {
			pod = l.Pod.Namespace + "/" + l.Pod.Name
		}
		cid := l.ContainerID
		if len(cid) > containerIDLen {
			cid = cid[:containerIDLen]
		}
		row := []string{
			orDash(ipString(l)), orDash(l.MAC), orDash(string(l.State)), orDash(string(l.Source)),
			orDash(pod), orDash(cid), orDash(l.IfName), orDash(l.Hostname), expires(l, now),
		}
		if dual {
			ip6 := ""
			if l.IP6.IsValid() {
				ip6 = l.IP6.String()
			}
			row = slices.Insert(row, 3, orDash(string(l.State6)))
			row = slices.Insert(row, 1, orDash(ip6))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

func ipString(l leases.Lease) string {
	if !l.IP.IsValid() {
		return ""
	}
	return l.IP.String()
}

// expires renders the EXPIRES column: "-" for a reservation held until it is
// released, and a mark on one whose time has passed but that nobody has
// expired yet (vmlaned expires leases on a timer; bootpd keeps old ones).
func expires(l leases.Lease, now time.Time) string {
	if l.Expires.IsZero() {
		return "-"
	}
	s := l.Expires.UTC().Format(time.RFC3339)
	if l.Expired(now) {
		s += " (expired)"
	}
	return s
}

// orDash keeps empty fields visible as a column.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	// A tab or newline in a field (a hand-edited hostname) would break the
	// table's rows and columns.
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}
