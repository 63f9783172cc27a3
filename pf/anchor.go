package pf

import (
	"fmt"
	"net/netip"
	"strings"
)

// DefaultAnchor is where vmlane's pf rules live. macOS's /etc/pf.conf
// evaluates the anchors under com.apple/ (nat-anchor "com.apple/*"), so an
// anchor there is reached without touching the main ruleset; anything
// outside com.apple/ would need an edit of pf.conf, which vmlane never makes.
const DefaultAnchor = "com.apple/vmlane"

// ValidAnchor checks that name is an anchor path pf.conf reaches (under
// com.apple/) and that pfctl takes as one argument: components of letters,
// digits, '.', '_' and '-'. The check also keeps a flush aimed at vmlane's
// anchor from ever reaching the main ruleset (an empty -a is the main one).
func ValidAnchor(name string) error {
	rest, ok := strings.CutPrefix(name, "com.apple/")
	if !ok || rest == "" {
		return fmt.Errorf("pf anchor %q is not under com.apple/: /etc/pf.conf evaluates only com.apple/* without an edit", name)
	}
	for _, part := range strings.Split(rest, "/") {
		if part == "" {
			return fmt.Errorf("pf anchor %q has an empty component", name)
		}
		for _, r := range part {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				return fmt.Errorf("pf anchor %q: %q is not a letter, digit, '.', '_' or '-'", name, r)
			}
		}
	}
	return nil
}

// NoNATRules returns the anchor's rules for one address family, as
// `pfctl -a ANCHOR -s nat` prints them: one "no nat" rule from the node's
// pod subnet to each prefix of the pod network of pod's family. Traffic
// from a VM to another pod then keeps the VM's address (the receiver sees
// the real pod IP), while traffic to anywhere else matches no rule here
// and falls through to vmnet's own NAT. Pure: golden tested.
func NoNATRules(pod netip.Prefix, cluster []netip.Prefix) []string {
	if !pod.IsValid() {
		return nil
	}
	af := "inet"
	if pod.Addr().Is6() {
		af = "inet6"
	}
	var out []string
	for _, c := range cluster {
		if c.Addr().Is4() != pod.Addr().Is4() {
			continue
		}
		out = append(out, fmt.Sprintf("no nat %s from %s to %s", af, pod.Masked(), c.Masked()))
	}
	return out
}

// anchorHeader opens the text loaded into the anchor. pfctl drops comments,
// so it is for whoever reads the rules' source in vmlaned's logs or tests.
const anchorHeader = `# vmlane: pod-to-pod traffic keeps the VM's address; everything else is
# left to vmnet's NAT. Loaded by vmlaned, which reloads it whenever the
# rules below differ from the anchor's; removed by "vmlanectl teardown".
`

// RenderAnchor is the text vmlaned loads with `pfctl -a ANCHOR -f -`.
// Loading replaces the anchor's whole ruleset at once, so the anchor never
// holds half of an update. Pure: golden tested.
func RenderAnchor(rules []string) string {
	var b strings.Builder
	b.WriteString(anchorHeader)
	for _, r := range rules {
		b.WriteString(r)
		b.WriteByte('\n')
	}
	return b.String()
}

// ParseShownRules reads the translation rules out of `pfctl -s nat`
// output, whitespace collapsed. pfctl mixes notes into its output on
// stderr ("No ALTQ support in kernel", "ALTQ related functions disabled"),
// so only lines that start like a translation rule count.
func ParseShownRules(out string) []string {
	var rules []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "no", "nat", "rdr", "binat", "nat-anchor", "rdr-anchor", "binat-anchor":
			rules = append(rules, strings.Join(f, " "))
		}
	}
	return rules
}
