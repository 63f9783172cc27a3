package leases_test

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vmlane/vmlane/leases"
)

// Both parsers read bytes from disk that another program wrote (a store of
// another version, an operator's editor, macOS bootpd), so both are fuzzed.
// Seed corpora: the f.Add calls below and testdata/fuzz/<FuzzName>/.
//
//	go test -run='^$' -fuzz='^FuzzDecode$' -fuzztime=30s ./leases
//	go test -run='^$' -fuzz='^FuzzParseBootpd$' -fuzztime=30s ./leases

// fileCmp compares decoded files: netip values by value, a nil lease list
// like an empty one ("leases":null and [] mean the same), times by Equal.
var fileCmp = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
	cmpopts.EquateEmpty(),
}

// sortedByIP returns a copy of f with its leases in the file's canonical
// order, so a comparison does not depend on whether Decode or Encode sorts
// in place.
func sortedByIP(f *leases.File) *leases.File {
	c := *f
	c.Leases = slices.Clone(f.Leases)
	slices.SortFunc(c.Leases, func(a, b leases.Lease) int { return a.IP.Compare(b.IP) })
	return &c
}

func FuzzDecode(f *testing.F) {
	for _, p := range []string{"testdata/example.json", "testdata/dhcpd_leases"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		``,
		`{}`,
		`null`,
		`{"version":1}`,
		`{"version":1,"subnet":"10.0.0.0/24","leases":null}`,
		`{"version":1,"subnet":"10.0.0.0/24","gateway":"","leases":[]}`,
		`{"version":1.0,"subnet":"10.0.0.0/24","leases":[]}`,
		`{"version":1,"subnet":"10.0.0.0/24","leases":[]} trailing`,
		`{"version":1,"subnet":"10.0.0.0/24","leases":[{"ip":"10.0.0.3","mac":"","state":"reserved","source":"cni","created":"2026-11-22T17:00:00Z"},{"ip":"10.0.0.2","mac":"02:00:00:00:00:02","state":"bound","source":"dhcp","created":"2026-11-22T19:00:00.123456789+02:00","expires":"2026-11-22T18:00:00-00:30"}]}`,
		`{"version":1,"subnet":"10.0.0.0/24","leases":[{"ip":"10.0.0.2","state":"bound","source":"cni","created":"2026-11-22T17:00:00Z"},{"ip":"10.0.0.2","state":"bound","source":"cni","created":"2026-11-22T17:00:00Z"}]}`,
		`{"version":1,"node":"n\u00e9<&>\u2028","subnet":"fd00::/64","gateway":"fd00::1","lastReserved":"fd00::9","leases":[{"ip":"fd00::9","mac":"02:00:00:00:00:09","state":"declined","source":"dhcp","hostname":"\"q\"\\","pod":{"name":"only-name"},"created":"0001-01-01T00:00:00Z"}],"future":{"x":[1,-2.5e-3,true,null,"s"]}}`,
		`{"Version":1,"SUBNET":"10.0.0.0/24","Leases":[{"IP":"10.0.0.2","State":"bound","SOURCE":"cni","created":"2026-11-22T17:00:00Z"}]}`,
		`{"version":1,"version":1,"subnet":"10.1.0.0/24","subnet":"10.0.0.0/24","leases":[{"ip":"10.0.0.2","state":"bound","source":"cni","created":"2026-11-22T17:00:00Z"}],"leases":[]}`,
		`{"version":1,"subnet":"10.0.0.0/24","leases":[{"ip":"::ffff:10.0.0.2","state":"bound","source":"cni","created":"2026-11-22T17:00:00Z"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		got, err := leases.Decode(in)
		if err != nil {
			return
		}
		// Decode must own what it returns: a caller may reuse its
		// buffer (a reader loop, a bufio.Reader) once Decode returns.
		for i := range in {
			in[i] = '#'
		}
		want, err := leases.Decode(data)
		if err != nil {
			t.Fatalf("Decode is not deterministic: the same input failed the second time: %v", err)
		}
		if diff := cmp.Diff(want, got, fileCmp); diff != "" {
			t.Fatalf("the File Decode returned changed when its input buffer was overwritten (-want +got):\n%s", diff)
		}

		orig := sortedByIP(got)
		enc, err := got.Encode()
		if err != nil {
			t.Fatalf("Decode accepted a file that Encode cannot write: %v", err)
		}
		if !json.Valid(enc) {
			t.Fatalf("Encode wrote invalid JSON:\n%s", enc)
		}
		back, err := leases.Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(f)) failed: %v\nencoded:\n%s", err, enc)
		}
		if diff := cmp.Diff(orig, sortedByIP(back), fileCmp); diff != "" {
			t.Fatalf("Decode(Encode(f)) != f (-f +round-trip):\n%s\nencoded:\n%s", diff, enc)
		}
		again, err := back.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, again) {
			t.Fatalf("Encode is not stable:\nfirst:\n%s\nsecond:\n%s", enc, again)
		}
		// Consumers in other languages read the file with their JSON
		// library; the standard one must read what Encode wrote the same
		// (but for the members neither knows, which it drops).
		var std leases.File
		if err := json.Unmarshal(enc, &std); err != nil {
			t.Fatalf("encoding/json cannot read Encode's output: %v\n%s", err, enc)
		}
		if diff := cmp.Diff(orig, &std, fileCmp, cmpopts.IgnoreTypes(leases.UnknownMembers{})); diff != "" {
			t.Fatalf("encoding/json reads Encode's output differently (-f +encoding/json):\n%s", diff)
		}
	})
}

var canonicalMACRe = regexp.MustCompile(`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`)

func FuzzParseBootpd(f *testing.F) {
	for _, p := range []string{"testdata/dhcpd_leases", "testdata/dhcpd_leases-macos15", "testdata/example.json"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"",
		"{\n}\n",
		"{\n\tip_address=192.168.64.2\n}\n",
		"{\r\n\tip_address=192.168.64.2\r\n\thw_address=1,A:B:C:D:E:F\r\n}\r\n",
		"{\n\tip_address=192.168.64.2\n\thw_address=1,0x1:2:3:4:5:6\n}\n",
		"{\n\tip_address=192.168.64.2\n\thw_address=1,+1:2:3:4:5:6\n}\n",
		"{\n\tip_address=192.168.64.2\n\thw_address=1,1:2:3:4:5:6:7\n}\n",
		"{\n\tip_address=192.168.64.2\n\thw_address=1,01-02-03-04-05-06\n}\n",
		"{\n\tip_address=::ffff:192.168.64.2\n}\n",
		"{\n\tip_address=192.168.64.2\n\tlease=0xffffffffffffffff\n}\n",
		"{\n\tip_address=192.168.64.2\n\tname=a=b\n\tlease=0x0\n}\n{\n",
		"{\n\tname=" + strings.Repeat("x", 5000) + "\n}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ls, err := leases.ParseBootpd(bytes.NewReader(data))
		if err != nil {
			return
		}
		for i, l := range ls {
			if !l.IP.Is4() {
				t.Errorf("lease %d: ip %v is not a valid IPv4 address", i, l.IP)
			}
			if l.MAC != "" && !canonicalMACRe.MatchString(l.MAC) {
				t.Errorf("lease %d: mac %q is neither empty nor canonical", i, l.MAC)
			}
			if l.State != leases.StateBound || l.Source != leases.SourceDHCP {
				t.Errorf("lease %d: state/source %s/%s, want every bootpd entry bound/dhcp", i, l.State, l.Source)
			}
		}
	})
}

// TestDecodeOwnsItsResult is the aliasing check of FuzzDecode on a plain
// input, so it runs even where the fuzz corpus is not: Decode must copy what
// it keeps, since callers may reuse the buffer they pass.
func TestDecodeOwnsItsResult(t *testing.T) {
	data, err := os.ReadFile("testdata/example.json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := leases.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Clone(data)
	got, err := leases.Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 'x'
	}
	if diff := cmp.Diff(want, got, fileCmp); diff != "" {
		t.Fatalf("overwriting the buffer given to Decode changed the decoded File (-want +got):\n%s", diff)
	}
}
