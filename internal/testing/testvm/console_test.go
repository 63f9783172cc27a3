package testvm

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	tests := []struct {
		name   string
		line   string
		want   event
		wantOK bool
	}{
		{
			name:   "ping with tty carriage return",
			line:   "VMLANE-PING target=10.1.2.1 ok sent=3 recv=3\r",
			want:   event{kind: "PING", words: []string{"ok"}, fields: map[string]string{"target": "10.1.2.1", "sent": "3", "recv": "3"}},
			wantOK: true,
		},
		{
			name:   "kernel message in front",
			line:   "[    2.926079] virtio_net: oops VMLANE-READY uptime=1.50",
			want:   event{kind: "READY", fields: map[string]string{"uptime": "1.50"}},
			wantOK: true,
		},
		{
			name:   "empty values and a value holding =",
			line:   "VMLANE-DHCP event=bound search= hostname=a=b",
			want:   event{kind: "DHCP", fields: map[string]string{"event": "bound", "search": "", "hostname": "a=b"}},
			wantOK: true,
		},
		{
			name:   "bare kind",
			line:   "VMLANE-DONE",
			want:   event{kind: "DONE", fields: map[string]string{}},
			wantOK: true,
		},
		{name: "kernel message", line: "[    2.926079] reboot: Power down"},
		{name: "empty", line: ""},
		{name: "prefix only", line: "VMLANE-   "},
		{name: "kind is a field", line: "VMLANE-x=y ok"},
		{name: "lower case prefix", line: "vmlane-DONE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseLine(tt.line)
			if ok != tt.wantOK || (ok && !reflect.DeepEqual(got, tt.want)) {
				t.Errorf("parseLine(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestResultApply(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  Result
	}{
		{
			name: "static run",
			lines: []string{
				"VMLANE-NET iface=eth0 mac=52:54:00:12:34:56 ip=10.99.0.2/24 gw=10.99.0.1 mode=static",
				"VMLANE-READY uptime=2.39",
				"VMLANE-PING target=10.99.0.1 ok sent=3 recv=3 rtt=0.512",
				"VMLANE-PING target=10.99.0.9 fail sent=3 recv=0 rtt=",
				"VMLANE-DONE errors=0 uptime=2.92",
			},
			want: Result{
				Net: &NetInfo{
					Iface:   "eth0",
					MAC:     "52:54:00:12:34:56",
					Addrs:   []netip.Prefix{netip.MustParsePrefix("10.99.0.2/24")},
					Gateway: netip.MustParseAddr("10.99.0.1"),
					Mode:    ModeStatic,
				},
				Pings: []PingResult{
					{Target: "10.99.0.1", OK: true, Sent: 3, Recv: 3, RTT: 512 * time.Microsecond},
					{Target: "10.99.0.9", Sent: 3},
				},
				Ready:      true,
				Done:       true,
				ReadyAfter: 2 * time.Second,
				DoneAfter:  5 * time.Second,
				Uptime:     2920 * time.Millisecond,
			},
		},
		{
			name: "dhcp lease with option 121",
			lines: []string{
				"VMLANE-DHCP event=deconfig",
				"VMLANE-DHCP event=nak message=wrong_server",
				"VMLANE-DHCP event=bound ip=10.99.0.57 mask=24 router=10.99.0.254 dns=10.99.0.1,10.99.0.2 " +
					"domain=vmlane.test search=a.test,b.test hostname=guest1 mtu=1400 lease=600 serverid=10.99.0.1 " +
					"routes=0.0.0.0/0:10.99.0.1,10.99.1.0/24:0.0.0.0",
			},
			want: Result{
				DHCPEvents: []string{"deconfig", "nak", "bound"},
				DHCP: &Lease{
					IP:       netip.MustParseAddr("10.99.0.57"),
					Bits:     24,
					Routers:  []netip.Addr{netip.MustParseAddr("10.99.0.254")},
					DNS:      []netip.Addr{netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")},
					Domain:   "vmlane.test",
					Search:   []string{"a.test", "b.test"},
					Hostname: "guest1",
					MTU:      1400,
					Lease:    10 * time.Minute,
					ServerID: netip.MustParseAddr("10.99.0.1"),
					Routes: []Route{
						{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("10.99.0.1")},
						{Dst: netip.MustParsePrefix("10.99.1.0/24")}, // on-link
					},
				},
			},
		},
		{
			name: "minimal lease leaves absent options zero",
			lines: []string{
				"VMLANE-DHCP event=bound ip=10.0.0.5 mask=8 router= dns= domain= search= hostname= mtu= lease= serverid= routes=",
			},
			want: Result{
				DHCPEvents: []string{"bound"},
				DHCP:       &Lease{IP: netip.MustParseAddr("10.0.0.5"), Bits: 8},
			},
		},
		{
			name: "guest errors and held guest",
			lines: []string{
				"VMLANE-ERROR msg=udhcpc_got_no_lease",
				"VMLANE-NET iface=eth0 mac=52:54:00:12:34:56 ip= gw= mode=dhcp",
				"VMLANE-HOLD uptime=3.5",
				"VMLANE-REPLY id=c1 ok body=x", // the VM's business, not the Result's
			},
			want: Result{
				Errors: []string{"guest: udhcpc got no lease"},
				Net:    &NetInfo{Iface: "eth0", MAC: "52:54:00:12:34:56", Mode: ModeDHCP},
				Held:   true,
				Uptime: 3500 * time.Millisecond,
			},
		},
		{
			name: "boot-time fetches",
			lines: []string{
				"VMLANE-FETCH url=http://10.96.0.10/cgi-bin/whoserves ok body=10.99.0.11_web-abc",
				"VMLANE-FETCH url=http://10.96.0.11/ fail msg=wget:_can't_connect_to_remote_host",
				"VMLANE-FETCH url=http://10.96.0.12/ maybe",
			},
			want: Result{
				Fetches: []FetchResult{
					{URL: "http://10.96.0.10/cgi-bin/whoserves", OK: true, Body: "10.99.0.11_web-abc"},
					{URL: "http://10.96.0.11/", Err: "wget: can't connect to remote host"},
					{URL: "http://10.96.0.12/"},
				},
				Errors: []string{`parsing "VMLANE-FETCH maybe url=http://10.96.0.12/": want one word, ok or fail, got ["maybe"]`},
			},
		},
		{
			name: "two NICs",
			lines: []string{
				"VMLANE-DHCP event=bound iface=eth0 ip=10.1.0.5 mask=24 router=10.1.0.1",
				"VMLANE-NET iface=eth0 mac=52:54:00:00:00:01 ip=10.1.0.5/24 gw=10.1.0.1 mode=dhcp",
				"VMLANE-DHCP event=bound iface=eth1 ip=10.2.0.7 mask=24 router=10.2.0.1",
				"VMLANE-NET iface=eth1 mac=52:54:00:00:00:02 ip=10.2.0.7/24 gw=10.2.0.1 mode=dhcp",
			},
			want: func() Result {
				l0 := &Lease{Iface: "eth0", IP: netip.MustParseAddr("10.1.0.5"), Bits: 24, Routers: []netip.Addr{netip.MustParseAddr("10.1.0.1")}}
				l1 := &Lease{Iface: "eth1", IP: netip.MustParseAddr("10.2.0.7"), Bits: 24, Routers: []netip.Addr{netip.MustParseAddr("10.2.0.1")}}
				n0 := &NetInfo{Iface: "eth0", MAC: "52:54:00:00:00:01", Addrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.5/24")}, Gateway: netip.MustParseAddr("10.1.0.1"), Mode: ModeDHCP}
				n1 := &NetInfo{Iface: "eth1", MAC: "52:54:00:00:00:02", Addrs: []netip.Prefix{netip.MustParsePrefix("10.2.0.7/24")}, Gateway: netip.MustParseAddr("10.2.0.1"), Mode: ModeDHCP}
				return Result{Net: n0, Nets: []*NetInfo{n0, n1}, DHCP: l1, Leases: map[string]*Lease{"eth0": l0, "eth1": l1}, DHCPEvents: []string{"bound", "bound"}}
			}(),
		},
		{
			name: "unparsable reports become errors",
			lines: []string{
				"VMLANE-PING target=10.0.0.1 maybe",
				"VMLANE-PING target=10.0.0.2 ok rtt=-1",
				"VMLANE-WHAT x=1",
				"VMLANE-DONE uptime=soon",
			},
			want: Result{
				Pings: []PingResult{{Target: "10.0.0.1"}, {Target: "10.0.0.2", OK: true}},
				Errors: []string{
					`parsing "VMLANE-PING maybe target=10.0.0.1": unknown word "maybe"`,
					`parsing "VMLANE-PING ok rtt=-1 target=10.0.0.2": bad rtt "-1"`,
					`parsing "VMLANE-WHAT x=1": unknown report kind`,
					`parsing "VMLANE-DONE uptime=soon": bad uptime "soon"`,
				},
				Done:      true,
				DoneAfter: 4 * time.Second,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Result
			for i, line := range tt.lines {
				if ev, ok := parseLine(line); ok {
					// Report i arrives i+1 seconds after start.
					got.apply(ev, time.Duration(i+1)*time.Second)
				} else {
					t.Fatalf("parseLine(%q) found no report", line)
				}
			}
			// One NIC: Nets and Leases hold Net and DHCP.
			if tt.want.Nets == nil && tt.want.Net != nil {
				tt.want.Nets = []*NetInfo{tt.want.Net}
			}
			if tt.want.Leases == nil && tt.want.DHCP != nil {
				tt.want.Leases = map[string]*Lease{tt.want.DHCP.Iface: tt.want.DHCP}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("result:\n got %s\nwant %s", dump(got), dump(tt.want))
			}
		})
	}
}

// TestParseConsole reads a pod's log: other lines between the reports.
func TestParseConsole(t *testing.T) {
	log := "vm-launcher: pod IP 10.244.2.5\n[    1.2] virtio_net\r\nVMLANE-PING target=10.244.0.3 ok sent=3 recv=3 rtt=1.0\r\n" +
		"VMLANE-FETCH url=http://10.96.0.10/cgi-bin/whoserves ok body=10.99.0.11_web-1\r\nVMLANE-HOLD uptime=9.5\n"
	got := ParseConsole(log)
	want := Result{
		Pings:   []PingResult{{Target: "10.244.0.3", OK: true, Sent: 3, Recv: 3, RTT: time.Millisecond}},
		Fetches: []FetchResult{{URL: "http://10.96.0.10/cgi-bin/whoserves", OK: true, Body: "10.99.0.11_web-1"}},
		Held:    true, Uptime: 9500 * time.Millisecond, Console: log,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseConsole:\n got %s\nwant %s", dump(got), dump(want))
	}
}

// TestResultApplyIPv6 reads the reports of vmlane.ip6=dhcp: udhcpc6's
// events (addresses in full, as it writes them) and the NIC's IPv6 state.
func TestResultApplyIPv6(t *testing.T) {
	var r Result
	for _, line := range []string{
		"VMLANE-DHCP6 event=deconfig",
		"VMLANE-DHCP6 event=bound ip6=fd00:0250:0044:0000:0000:0000:0000:0004 dns=fd00:0096:0000:0000:0000:0000:0000:000a search=svc.cluster.local,cluster.local",
		"VMLANE-NET6 iface=eth0 ip6=fd00:250:44::4/128 gw6=fe80::76:aff:fefa:2c01",
	} {
		ev, ok := parseLine(line)
		if !ok {
			t.Fatalf("parseLine(%q) found no report", line)
		}
		r.apply(ev, time.Second)
	}
	if len(r.Errors) > 0 {
		t.Fatalf("errors: %v", r.Errors)
	}
	want6 := &Lease6{IP: netip.MustParseAddr("fd00:250:44::4"), DNS: []netip.Addr{netip.MustParseAddr("fd00:96::a")}, Search: []string{"svc.cluster.local", "cluster.local"}}
	if !reflect.DeepEqual(r.DHCP6, want6) || !reflect.DeepEqual(r.DHCP6Events, []string{"deconfig", "bound"}) {
		t.Errorf("DHCP6 %+v events %v, want %+v after deconfig, bound", r.DHCP6, r.DHCP6Events, want6)
	}
	wantNet := &Net6Info{Iface: "eth0", Addrs: []netip.Prefix{netip.MustParsePrefix("fd00:250:44::4/128")}, Gateway: netip.MustParseAddr("fe80::76:aff:fefa:2c01")}
	if !reflect.DeepEqual(r.Net6, wantNet) {
		t.Errorf("Net6 %+v, want %+v", r.Net6, wantNet)
	}
	ev, _ := parseLine("VMLANE-DHCP6 event=bound ip6=not-an-address")
	r.apply(ev, time.Second)
	if len(r.Errors) != 1 {
		t.Errorf("a bad address gave errors %v, want one", r.Errors)
	}
}

// dump prints a Result with its pointers followed, for failure messages.
func dump(r Result) string {
	var net, lease string
	if r.Net != nil {
		net = fmt.Sprintf("%+v", *r.Net)
	}
	if r.DHCP != nil {
		lease = fmt.Sprintf("%+v", *r.DHCP)
	}
	r.Net, r.DHCP = nil, nil
	return fmt.Sprintf("Net:%s DHCP:%s rest:%+v", net, lease, r)
}

// FuzzParseLine checks that no console line panics the parser, that every
// report it finds formats back to itself, and that applying it to a Result
// does not panic. The seed corpus is in testdata/fuzz/FuzzParseLine.
func FuzzParseLine(f *testing.F) {
	f.Add("VMLANE-PING target=10.1.2.1 ok sent=3 recv=3\r")
	f.Add("VMLANE-DHCP event=bound ip=10.0.0.5 mask=8 routes=0.0.0.0/0:10.0.0.1,10.1.0.0/16:0.0.0.0")
	f.Fuzz(func(t *testing.T, line string) {
		ev, ok := parseLine(line)
		if !ok {
			return
		}
		again, ok := parseLine(ev.String())
		if !ok || !reflect.DeepEqual(again, ev) {
			t.Fatalf("parseLine(%q) = %+v, but its String %q parses to %+v, %v", line, ev, ev.String(), again, ok)
		}
		var r Result
		r.apply(ev, time.Second)
	})
}

func TestParseReply(t *testing.T) {
	tests := []struct {
		line    string
		want    reply // ev aside
		wantMsg string
		wantErr string
	}{
		{line: "VMLANE-REPLY id=c1 ok target=10.0.0.1 sent=3 recv=3 rtt=0.4", want: reply{id: "c1", ok: true}, wantMsg: "no reason given"},
		{line: "VMLANE-REPLY id=c2 fail msg=unknown_command", want: reply{id: "c2"}, wantMsg: "unknown command"},
		{line: "VMLANE-REPLY id=c3 fail body=connection_refused", want: reply{id: "c3"}, wantMsg: "connection refused"},
		{line: "VMLANE-REPLY ok body=x", wantErr: "reply without id"},
		{line: "VMLANE-REPLY id=c4 body=x", wantErr: "want ok or fail"},
		{line: "VMLANE-REPLY id=c5 ok fail", wantErr: "want ok or fail"},
	}
	for _, tt := range tests {
		ev, ok := parseLine(tt.line)
		if !ok {
			t.Fatalf("parseLine(%q) found no report", tt.line)
		}
		got, err := parseReply(ev)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseReply(%q) error %v, want %q", tt.line, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.id != tt.want.id || got.ok != tt.want.ok || got.message() != tt.wantMsg {
			t.Errorf("parseReply(%q) = id %q ok %v message %q, %v; want %+v, message %q",
				tt.line, got.id, got.ok, got.message(), err, tt.want, tt.wantMsg)
		}
	}
}
