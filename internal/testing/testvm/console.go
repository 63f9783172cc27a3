package testvm

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The console protocol of guest/init and guest/udhcpc.script: one report
// per line, "VMLANE-KIND" followed by space-separated fields that are
// key=value pairs or bare words. Values hold no spaces; lists are
// comma-joined.
const linePrefix = "VMLANE-"

// Report kinds.
const (
	kindNet   = "NET"   // NIC configured: iface mac ip gw mode
	kindReady = "READY" // configuration done, pings about to start
	kindDHCP  = "DHCP"  // one udhcpc event, with the lease on bound/renew
	kindNet6  = "NET6"  // IPv6 configured (vmlane.ip6=dhcp): iface ip6 gw6
	kindDHCP6 = "DHCP6" // one udhcpc6 event, with the address on bound/renew
	kindPing  = "PING"  // target ok|fail sent recv
	kindFetch = "FETCH" // url ok body | url fail msg (vmlane.fetch)
	kindError = "ERROR" // msg
	kindHold  = "HOLD"  // pings done, staying up, reading commands
	kindDone  = "DONE"  // errors uptime, just before poweroff
	kindReply = "REPLY" // id ok|fail and the command's fields (command.go)
)

// event is one parsed console report.
type event struct {
	kind   string
	words  []string          // bare words, in order
	fields map[string]string // key=value pairs
}

// parseLine parses one console line. ok is false for lines that carry no
// report (kernel messages, udhcpc chatter). A report may follow other text
// on the same line, as when a kernel message and ours interleave on the
// serial port; a trailing \r from the tty is ignored.
func parseLine(line string) (ev event, ok bool) {
	i := strings.Index(line, linePrefix)
	if i < 0 {
		return event{}, false
	}
	toks := strings.Fields(line[i+len(linePrefix):])
	if len(toks) == 0 || strings.Contains(toks[0], "=") {
		return event{}, false
	}
	ev = event{kind: toks[0], fields: map[string]string{}}
	for _, t := range toks[1:] {
		if k, v, found := strings.Cut(t, "="); found {
			ev.fields[k] = v
		} else {
			ev.words = append(ev.words, t)
		}
	}
	return ev, true
}

// String formats e in the console syntax, fields sorted by key, so that
// parseLine(e.String()) gives e back.
func (e event) String() string {
	var b strings.Builder
	b.WriteString(linePrefix + e.kind)
	for _, w := range e.words {
		b.WriteString(" " + w)
	}
	for _, k := range slices.Sorted(maps.Keys(e.fields)) {
		b.WriteString(" " + k + "=" + e.fields[k])
	}
	return b.String()
}

// Result is what the guest reported on its console.
type Result struct {
	// Net is the NIC as configured (VMLANE-NET), nil if never reported;
	// Nets are every NIC's report, Config.More's after it.
	Net  *NetInfo
	Nets []*NetInfo
	// DHCP is the last lease udhcpc bound or renewed, nil if none;
	// Leases is the last of each NIC, by its name in the guest.
	DHCP   *Lease
	Leases map[string]*Lease
	// DHCPEvents lists udhcpc's events in order: deconfig, bound, renew,
	// nak, leasefail.
	DHCPEvents []string
	// Net6 is the NIC's IPv6 configuration (VMLANE-NET6), nil unless
	// Config.IPv6 asked for it.
	Net6 *Net6Info
	// DHCP6 is the last address udhcpc6 bound or renewed, nil if none;
	// DHCP6Events lists udhcpc6's events in order.
	DHCP6       *Lease6
	DHCP6Events []string
	// Pings holds one entry per ping target, in order.
	Pings []PingResult
	// Fetches holds one entry per Config.Fetch URL, in order.
	Fetches []FetchResult
	// Errors holds the guest's VMLANE-ERROR messages and reports this
	// package could not parse.
	Errors []string
	// Ready is set once the guest finished configuring its NIC, Held once
	// a Hold guest finished pinging, Done once it is about to power off.
	Ready, Held, Done bool
	// ReadyAfter and DoneAfter are the times from start to VMLANE-READY
	// and VMLANE-DONE as seen by the host.
	ReadyAfter, DoneAfter time.Duration
	// Uptime is the guest's own uptime at VMLANE-DONE or VMLANE-HOLD.
	Uptime time.Duration
	// Console is the whole serial output, for test failure messages.
	Console string
	// Stderr is QEMU's own diagnostics (tap errors and the like).
	Stderr string
}

// NetInfo is a VMLANE-NET report.
type NetInfo struct {
	Iface   string
	MAC     string
	Addrs   []netip.Prefix
	Gateway netip.Addr // zero if none
	Mode    Mode
}

// Net6Info is a VMLANE-NET6 report: the NIC's global IPv6 addresses and
// the default router the router advertisements gave (a link-local
// address).
type Net6Info struct {
	Iface   string
	Addrs   []netip.Prefix
	Gateway netip.Addr
}

// Lease6 is a VMLANE-DHCP6 bound or renew report: what udhcpc6 got.
type Lease6 struct {
	IP     netip.Addr
	DNS    []netip.Addr
	Search []string
}

// Lease is a VMLANE-DHCP bound or renew report: the options udhcpc got.
// Zero values mean the server did not send the option.
type Lease struct {
	Iface    string // the guest's NIC
	IP       netip.Addr
	Bits     int // prefix length from option 1
	Routers  []netip.Addr
	DNS      []netip.Addr
	Domain   string
	Search   []string
	Hostname string
	MTU      int
	Lease    time.Duration
	ServerID netip.Addr
	// Routes are option 121 classless static routes; a zero Gateway is an
	// on-link route.
	Routes []Route
}

// Prefix is the leased address with its prefix length.
func (l *Lease) Prefix() netip.Prefix { return netip.PrefixFrom(l.IP, l.Bits) }

// Route is one classless static route (RFC 3442).
type Route struct {
	Dst     netip.Prefix
	Gateway netip.Addr
}

// PingResult is a VMLANE-PING report, or the answer to [VM.Ping].
type PingResult struct {
	Target string
	// OK is busybox ping's verdict: at least one echo reply came back.
	OK         bool
	Sent, Recv int
	// RTT is the average round-trip time, 0 if unknown (no reply, or a
	// guest too old to report it).
	RTT time.Duration
}

// FetchResult is a VMLANE-FETCH report: a boot-time GET of Config.Fetch.
type FetchResult struct {
	URL string
	OK  bool
	// Body is the first line of the body, with _ for every space (as
	// [VM.Fetch] gets it before turning them back); Err is wget's message
	// when the GET failed, its underscores turned back into spaces.
	Body, Err string
}

// Ping returns the result for target, ok false if it was not pinged.
func (r *Result) Ping(target string) (p PingResult, ok bool) {
	for _, p := range r.Pings {
		if p.Target == target {
			return p, true
		}
	}
	return PingResult{}, false
}

// ParseConsole reads a whole console transcript, such as a VM pod's log,
// into a Result (without its times, which only a live run knows).
func ParseConsole(text string) Result {
	r := Result{Console: text}
	for _, line := range strings.Split(text, "\n") {
		if ev, ok := parseLine(line); ok {
			r.apply(ev, 0)
		}
	}
	return r
}

// apply records ev, seen at time at since start, in r.
func (r *Result) apply(ev event, at time.Duration) {
	var err error
	switch ev.kind {
	case kindNet:
		var n *NetInfo
		n, err = parseNet(ev)
		if r.Net == nil {
			r.Net = n
		}
		r.Nets = append(r.Nets, n)
	case kindReady:
		r.Ready, r.ReadyAfter = true, at
	case kindDHCP:
		name := ev.fields["event"]
		r.DHCPEvents = append(r.DHCPEvents, name)
		if name == "bound" || name == "renew" {
			r.DHCP, err = parseLease(ev)
			if r.Leases == nil {
				r.Leases = map[string]*Lease{}
			}
			r.Leases[r.DHCP.Iface] = r.DHCP
		}
	case kindNet6:
		r.Net6, err = parseNet6(ev)
	case kindDHCP6:
		name := ev.fields["event"]
		r.DHCP6Events = append(r.DHCP6Events, name)
		if name == "bound" || name == "renew" {
			r.DHCP6, err = parseLease6(ev)
		}
	case kindPing:
		var p PingResult
		p, err = parsePing(ev)
		r.Pings = append(r.Pings, p)
	case kindFetch:
		var f FetchResult
		f, err = parseFetch(ev)
		r.Fetches = append(r.Fetches, f)
	case kindError:
		r.Errors = append(r.Errors, "guest: "+strings.ReplaceAll(ev.fields["msg"], "_", " "))
	case kindHold:
		r.Held = true
		r.Uptime, err = parseUptime(ev.fields["uptime"])
	case kindDone:
		r.Done, r.DoneAfter = true, at
		r.Uptime, err = parseUptime(ev.fields["uptime"])
	case kindReply:
		// Answers to commands: the VM keeps them by id (VM.line).
	default:
		err = fmt.Errorf("unknown report kind")
	}
	if err != nil {
		r.Errors = append(r.Errors, fmt.Sprintf("parsing %q: %v", ev.String(), err))
	}
}

func parseNet(ev event) (*NetInfo, error) {
	n := &NetInfo{Iface: ev.fields["iface"], MAC: ev.fields["mac"], Mode: Mode(ev.fields["mode"])}
	var err error
	if n.Addrs, err = parseList(ev.fields["ip"], netip.ParsePrefix); err != nil {
		return n, err
	}
	n.Gateway, err = parseOptAddr(ev.fields["gw"])
	return n, err
}

func parseNet6(ev event) (*Net6Info, error) {
	n := &Net6Info{Iface: ev.fields["iface"]}
	var err error
	if n.Addrs, err = parseList(ev.fields["ip6"], netip.ParsePrefix); err != nil {
		return n, err
	}
	n.Gateway, err = parseOptAddr(ev.fields["gw6"])
	return n, err
}

// parseLease6 reads a VMLANE-DHCP6 report; udhcpc6 writes addresses in
// full ("fd00:0250:…"), which netip reads as well.
func parseLease6(ev event) (*Lease6, error) {
	l := &Lease6{}
	var err1, err2 error
	l.IP, err1 = parseOptAddr(ev.fields["ip6"])
	l.DNS, err2 = parseList(ev.fields["dns"], netip.ParseAddr)
	l.Search, _ = parseList(ev.fields["search"], func(s string) (string, error) { return s, nil })
	return l, errors.Join(err1, err2)
}

func parseLease(ev event) (*Lease, error) {
	f := ev.fields
	l := &Lease{Iface: f["iface"], Domain: f["domain"], Hostname: f["hostname"]}
	var errs []error
	collect := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	l.IP, err = parseOptAddr(f["ip"])
	collect(err)
	l.Bits, err = parseOptInt(f["mask"])
	collect(err)
	l.Routers, err = parseList(f["router"], netip.ParseAddr)
	collect(err)
	l.DNS, err = parseList(f["dns"], netip.ParseAddr)
	collect(err)
	l.Search, _ = parseList(f["search"], func(s string) (string, error) { return s, nil })
	l.MTU, err = parseOptInt(f["mtu"])
	collect(err)
	secs, err := parseOptInt(f["lease"])
	collect(err)
	l.Lease = time.Duration(secs) * time.Second
	l.ServerID, err = parseOptAddr(f["serverid"])
	collect(err)
	l.Routes, err = parseList(f["routes"], parseRoute)
	collect(err)
	if len(errs) > 0 {
		return l, fmt.Errorf("%v", errs)
	}
	return l, nil
}

// parseRoute parses "dst/len:gw" as guest/udhcpc.script writes option 121.
func parseRoute(s string) (Route, error) {
	dst, gw, ok := strings.Cut(s, ":")
	if !ok {
		return Route{}, fmt.Errorf("route %q: want dst/len:gw", s)
	}
	var r Route
	var err error
	if r.Dst, err = netip.ParsePrefix(dst); err != nil {
		return r, err
	}
	if r.Gateway, err = netip.ParseAddr(gw); err != nil {
		return r, err
	}
	if r.Gateway.IsUnspecified() {
		r.Gateway = netip.Addr{}
	}
	return r, nil
}

func parseFetch(ev event) (FetchResult, error) {
	f := FetchResult{URL: ev.fields["url"], Body: ev.fields["body"], Err: strings.ReplaceAll(ev.fields["msg"], "_", " ")}
	if len(ev.words) != 1 || (ev.words[0] != "ok" && ev.words[0] != "fail") {
		return f, fmt.Errorf("want one word, ok or fail, got %q", ev.words)
	}
	f.OK = ev.words[0] == "ok"
	return f, nil
}

func parsePing(ev event) (PingResult, error) {
	p := PingResult{Target: ev.fields["target"]}
	for _, w := range ev.words {
		switch w {
		case "ok":
			p.OK = true
		case "fail":
		default:
			return p, fmt.Errorf("unknown word %q", w)
		}
	}
	var err error
	if p.Sent, err = parseOptInt(ev.fields["sent"]); err != nil {
		return p, err
	}
	if p.Recv, err = parseOptInt(ev.fields["recv"]); err != nil {
		return p, err
	}
	p.RTT, err = parseMillis(ev.fields["rtt"])
	return p, err
}

// parseMillis parses busybox ping's "0.123" milliseconds; empty gives 0.
func parseMillis(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	ms, err := strconv.ParseFloat(s, 64)
	if err != nil || !(ms >= 0 && ms <= 1e9) { // NaN fails both
		return 0, fmt.Errorf("bad rtt %q", s)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// reply is a VMLANE-REPLY: the guest's answer to the command with its id.
type reply struct {
	id string
	ok bool
	ev event // the whole report, for the command's own fields
}

// parseReply checks a VMLANE-REPLY for its id and verdict.
func parseReply(ev event) (reply, error) {
	r := reply{id: ev.fields["id"], ev: ev}
	if r.id == "" {
		return r, fmt.Errorf("reply without id")
	}
	switch {
	case slices.Equal(ev.words, []string{"ok"}):
		r.ok = true
	case slices.Equal(ev.words, []string{"fail"}):
	default:
		return r, fmt.Errorf("reply words %q, want ok or fail", ev.words)
	}
	return r, nil
}

// message is the reason a failed reply gives, spaces restored.
func (r reply) message() string {
	msg := r.ev.fields["msg"]
	if msg == "" {
		msg = r.ev.fields["body"]
	}
	if msg == "" {
		msg = "no reason given"
	}
	return strings.ReplaceAll(msg, "_", " ")
}

// parseUptime parses /proc/uptime's "12.34" seconds.
func parseUptime(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil || !(secs >= 0 && secs <= 1e9) { // NaN fails both
		return 0, fmt.Errorf("bad uptime %q", s)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

func parseOptAddr(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	return netip.ParseAddr(s)
}

func parseOptInt(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.Atoi(s)
}

// parseList parses a comma-joined list; empty gives nil.
func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	if s == "" {
		return nil, nil
	}
	var out []T
	for _, item := range strings.Split(s, ",") {
		v, err := parse(item)
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}
