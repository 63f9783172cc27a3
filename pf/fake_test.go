package pf

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// fakePfctl is a recording commandRunner that behaves like macOS's pfctl
// for the commands vmlane runs, and prints its state as pfctl does:
// references as `pfctl -s References` lists them, each anchor's rules as
// `pfctl -a ANCHOR -s nat` prints them.
type fakePfctl struct {
	calls   []string
	refs    []string             // tokens held
	created map[string]time.Time // each token's creation, as the kernel stamps it
	now     time.Time            // the fake's clock, for tokens' ages
	skew    time.Duration        // added to every age printed: a pfctl whose ages mean something else
	anchors map[string][]string  // anchor -> translation rules
	// main is the main ruleset's translation lines, as `pfctl -s nat`
	// prints them: macOS's /etc/pf.conf, with InternetSharing's after.
	main      []string
	nextToken int
	failOn    string // a call prefix that fails
}

func newFakePfctl() *fakePfctl {
	// Internet Sharing (vmnet's NAT) already holds a reference.
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	return &fakePfctl{refs: []string{"10001"}, created: map[string]time.Time{"10001": t0.Add(-time.Hour)}, now: t0,
		anchors: map[string][]string{}, nextToken: 20001, main: []string{
			`nat-anchor "com.apple/*" all`,
			`nat-anchor "com.apple.internet-sharing/*" all`,
		}}
}

func (f *fakePfctl) Run(stdin string, argv ...string) (string, error) {
	call := strings.Join(argv, " ")
	if stdin != "" {
		call += " <<EOF\n" + stdin + "EOF"
	}
	f.calls = append(f.calls, call)
	if f.failOn != "" && strings.HasPrefix(call, f.failOn) {
		return "pfctl: injected failure\n", fmt.Errorf("exit status 1")
	}
	if len(argv) == 0 || argv[0] != "pfctl" {
		return "", fmt.Errorf("fake runs only pfctl, not %q", call)
	}
	args := argv[1:]
	anchor := ""
	if len(args) >= 2 && args[0] == "-a" {
		anchor, args = args[1], args[2:]
	}
	const altq = "No ALTQ support in kernel\nALTQ related functions disabled\n"
	switch strings.Join(args, " ") {
	case "-E":
		tok := strconv.Itoa(f.nextToken)
		f.nextToken++
		f.refs = append(f.refs, tok)
		f.created[tok] = f.now
		return altq + "pf enabled\nToken : " + tok + "\n", nil
	case "-s References":
		if len(f.refs) == 0 {
			return "No pf starter references held\n", nil
		}
		// As macOS 26's pfctl prints it: the age since the kernel's
		// timestamp of the reference's creation.
		var b strings.Builder
		b.WriteString("TOKENS:\nPID      Process Name                TOKEN                     TIMESTAMP\n")
		for _, t := range f.refs {
			age := f.now.Sub(f.created[t]) + f.skew
			fmt.Fprintf(&b, "%-8d %-27s %-25s %d days %02d:%02d:%02d\n", 100, "pfctl", t,
				int(age.Hours())/24, int(age.Hours())%24, int(age.Minutes())%60, int(age.Seconds())%60)
		}
		return b.String(), nil
	case "-s nat":
		var b strings.Builder
		b.WriteString(altq)
		rules := f.anchors[anchor]
		if anchor == "" {
			rules = f.main
		}
		for _, r := range rules {
			b.WriteString(r + "\n")
		}
		return b.String(), nil
	case "-f -":
		f.anchors[anchor] = ParseShownRules(stdin)
		return altq, nil
	case "-F nat":
		delete(f.anchors, anchor)
		return altq + "nat cleared\n", nil
	case "-F rules":
		return altq + "rules cleared\n", nil
	}
	if len(args) == 2 && args[0] == "-X" {
		i := slices.Index(f.refs, args[1])
		if i < 0 {
			return "pfctl: DIOCSTOPREF: Invalid argument\n", fmt.Errorf("exit status 1")
		}
		f.refs = slices.Delete(f.refs, i, i+1)
		return altq + "disable request successful\n", nil
	}
	return "", fmt.Errorf("fake pfctl: unknown command %q", call)
}

// String prints pf's state: whether it is enabled, the references, and
// every anchor's rules.
func (f *fakePfctl) String() string {
	var b strings.Builder
	status := "Disabled"
	if len(f.refs) > 0 {
		status = "Enabled"
	}
	fmt.Fprintf(&b, "Status: %s\nReferences: %s\n", status, strings.Join(f.refs, " "))
	names := make([]string, 0, len(f.anchors))
	for a := range f.anchors {
		names = append(names, a)
	}
	slices.Sort(names)
	for _, a := range names {
		fmt.Fprintf(&b, "# pfctl -a %s -s nat\n", a)
		for _, r := range f.anchors[a] {
			b.WriteString(r + "\n")
		}
	}
	return b.String()
}
