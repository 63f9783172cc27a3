package leases

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzCodecMatchesEncodingJSON holds the hand-written codec to
// encoding/json's behaviour: whatever the fast decoder accepts, encoding/json
// accepts and decodes to the same known fields; the members it keeps as
// unknown are exactly those encoding/json finds no field for, byte for byte;
// every lease's known fields encode to the same bytes json.Marshal produces;
// and Encode writes the unknown members back where encoding/json finds them
// again, byte for byte.
func FuzzCodecMatchesEncodingJSON(f *testing.F) {
	example, err := os.ReadFile("testdata/example.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, s := range []string{
		`{"version":1,"subnet":"10.0.0.0/24","leases":[{"ip":"10.0.0.2","mac":"02:00:00:00:00:01","state":"bound","source":"cni","created":"2026-11-22T17:00:00.5+01:00"}]}`,
		`{"VERSION":1,"Subnet":"10.0.0.0/24","LEASES":[{"IP":"10.0.0.2","hostname":"a\u00e9\"<b>","created":"2026-11-22T17:00:00Z"}]}`,
		`{"version":1,"leases":[null,{"pod":null,"expires":null}],"extra":{"a":[1,2.5e3,true,false,null,"x"]}}`,
		`{"version":1,"node":"\ud83d\ude00","created":"\u0032026-11-22T17:00:00Z"}`,
		`{"version":1,"leases":[{"created":"2026-02-30T17:00:00Z"}]}`,
		`{"version":1,"leases":[{"hostname":"bad \xff utf8"}]}`,
		"{\"version\":1}\x00\x00", // trailing NULs: encoding/json refuses them
		`{"version":1,"subnet":"10.0.0.0/24","gateway":"10.0.0.1","subnet6":"fd00::/64","gateway6":"fd00::1","lastReserved6":"fd00::2","leases":[{"mac":"52:54:00:00:00:01","ip":"10.0.0.2","ip6":"fd00::2","state":"reserved","source":"cni","state6":"bound","expires6":"2026-11-22T18:00:00Z"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeFile(string(data))
		if err != nil {
			return // stricter than encoding/json is allowed
		}
		var want File
		if jerr := json.Unmarshal(data, &want); jerr != nil {
			t.Fatalf("fast decoder accepted what encoding/json rejects (%v):\n%q", jerr, data)
		}
		if diff := cmp.Diff(&want, got, cmpOpts, cmpopts.IgnoreTypes(UnknownMembers{})); diff != "" {
			t.Fatalf("fast decoder disagrees with encoding/json (-json +fast):\n%s", diff)
		}
		ref, err := unknownByJSON(data)
		if err != nil {
			t.Fatalf("encoding/json accepts the file but the reference walk fails: %v\n%q", err, data)
		}
		if diff := cmp.Diff(ref, unknownOf(got)); diff != "" {
			t.Fatalf("fast decoder keeps other unknown members than encoding/json finds (-json +fast):\n%s\ninput %q", diff, data)
		}
		for i := range got.Leases {
			known := got.Leases[i]
			known.Unknown, known.Pod.Unknown = UnknownMembers{}, UnknownMembers{}
			j, err := json.Marshal(&known)
			if err != nil {
				continue // e.g. a year past 9999: encoding/json refuses it
			}
			if fast := appendLease(nil, &known); !bytes.Equal(fast, j) {
				t.Fatalf("lease %d encodes differently:\njson %s\nfast %s", i, j, fast)
			}
			// Encode's output of the whole lease, unknown members
			// included, must hold them where encoding/json finds them.
			enc := appendLease(nil, &got.Leases[i])
			encRef, err := unknownByJSON([]byte(`{"version":1,"leases":[` + string(enc) + `]}`))
			if err != nil {
				t.Fatalf("lease %d: encoding/json cannot read its encoding %s: %v", i, enc, err)
			}
			if diff := cmp.Diff(ref.Leases[i], encRef.Leases[0]); diff != "" {
				t.Fatalf("lease %d: its unknown members do not survive encoding (-read +encoded):\n%s\nencoded %s", i, diff, enc)
			}
		}
		if got.Unknown.IsZero() {
			return
		}
		// The file's own unknown members follow "leases" (left empty
		// here, its leases are checked above).
		empty := *got
		empty.Leases = nil
		enc, err := empty.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if encRef, err := unknownByJSON(enc); err != nil || encRef.File != ref.File {
			t.Fatalf("the file's unknown members do not survive encoding: read %q, encoded %s (%v)", ref.File, enc, err)
		}
	})
}

// unknownMembers lists the members of the file object, of each lease and
// of each lease's pod that no field takes, each object's verbatim (from key
// to end of value) and joined by commas, in their order.
type unknownMembers struct {
	File   string
	Leases []leaseUnknown
}

type leaseUnknown struct{ Lease, Pod string }

// unknownOf is what the codec kept.
func unknownOf(f *File) unknownMembers {
	u := unknownMembers{File: f.Unknown.String()}
	for _, l := range f.Leases {
		u.Leases = append(u.Leases, leaseUnknown{l.Unknown.String(), l.Pod.Unknown.String()})
	}
	return u
}

// unknownByJSON is unknownOf computed by encoding/json alone, as a
// reference: it decides which keys name a field, and it cuts the members
// out of data. data must be a file encoding/json accepts.
func unknownByJSON(data []byte) (unknownMembers, error) {
	var u unknownMembers
	var err error
	u.File, err = jsonUnknown(data, reflect.TypeFor[File](), func(key string, val []byte) error {
		if !strings.EqualFold(key, "leases") || string(val) == "null" {
			return nil
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(val, &elems); err != nil {
			return err
		}
		for _, e := range elems {
			var lu leaseUnknown
			if string(e) != "null" {
				if lu.Lease, err = jsonUnknown(e, reflect.TypeFor[Lease](), func(key string, val []byte) error {
					if !strings.EqualFold(key, "pod") || string(val) == "null" {
						return nil
					}
					pod, err := jsonUnknown(val, reflect.TypeFor[Pod](), func(string, []byte) error { return nil })
					lu.Pod = joinMembers(lu.Pod, pod) // a repeated "pod" merges
					return err
				}); err != nil {
					return err
				}
			}
			u.Leases = append(u.Leases, lu)
		}
		return nil
	})
	return u, err
}

// jsonUnknown walks the JSON object obj with encoding/json's tokenizer. It
// returns the members whose key encoding/json matches to no field of typ,
// verbatim and joined by commas, and calls known with the key and value of
// each other member.
func jsonUnknown(obj []byte, typ reflect.Type, known func(key string, val []byte) error) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil { // {
		return "", err
	}
	var unknown string
	for dec.More() {
		start := dec.InputOffset() // before the comma, if any
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		key := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return "", err
		}
		if namesField(typ, key) {
			if err := known(key, val); err != nil {
				return "", err
			}
			continue
		}
		unknown = joinMembers(unknown, string(bytes.TrimLeft(obj[start:dec.InputOffset()], " \t\r\n,")))
	}
	return unknown, nil
}

func joinMembers(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "," + b
}

// namesField reports whether encoding/json decodes a member named key into
// a field of typ: with DisallowUnknownFields, only a key it cannot place
// is an error.
func namesField(typ reflect.Type, key string) bool {
	k, _ := json.Marshal(key)
	dec := json.NewDecoder(strings.NewReader("{" + string(k) + ":null}"))
	dec.DisallowUnknownFields()
	return dec.Decode(reflect.New(typ).Interface()) == nil
}

// TestDecodeRejectsTrailingNULs: bytes after the top-level object, NULs
// included, make the file unreadable, as encoding/json has it. The codec
// took a NUL for the end of the input.
func TestDecodeRejectsTrailingNULs(t *testing.T) {
	for _, tail := range []string{"\x00", "\x00\x00\x00\x00", " \n\x00", "x"} {
		data := []byte(`{"version":1,"subnet":"10.0.0.0/24","leases":[]}` + tail)
		if _, err := decodeFile(string(data)); err == nil {
			t.Errorf("decodeFile accepted the object followed by %q", tail)
		}
		if json.Unmarshal(data, new(File)) == nil {
			t.Errorf("encoding/json accepts %q after the object: the test is wrong", tail)
		}
	}
	if _, err := decodeFile(`{"version":1}` + " \n\t\r"); err != nil {
		t.Errorf("trailing white space: %v", err)
	}
}
