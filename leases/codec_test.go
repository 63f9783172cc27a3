package leases

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzCodecMatchesEncodingJSON holds the hand-written codec to
// encoding/json's behaviour: whatever the fast decoder accepts, encoding/json
// accepts and decodes to the same File, and every lease encodes to the same
// bytes json.Marshal produces.
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
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeFile(bytes.Clone(data))
		if err != nil {
			return // stricter than encoding/json is allowed
		}
		var want File
		if jerr := json.Unmarshal(data, &want); jerr != nil {
			t.Fatalf("fast decoder accepted what encoding/json rejects (%v):\n%q", jerr, data)
		}
		if diff := cmp.Diff(&want, got, cmpOpts); diff != "" {
			t.Fatalf("fast decoder disagrees with encoding/json (-json +fast):\n%s", diff)
		}
		for i := range got.Leases {
			j, err := json.Marshal(&got.Leases[i])
			if err != nil {
				continue // e.g. a year past 9999: encoding/json refuses it
			}
			if fast := appendLease(nil, &got.Leases[i]); !bytes.Equal(fast, j) {
				t.Fatalf("lease %d encodes differently:\njson %s\nfast %s", i, j, fast)
			}
		}
	})
}

// TestDecodeRejectsTrailingNULs: bytes after the top-level object, NULs
// included, make the file unreadable, as encoding/json has it. The codec
// took a NUL for the end of the input.
func TestDecodeRejectsTrailingNULs(t *testing.T) {
	for _, tail := range []string{"\x00", "\x00\x00\x00\x00", " \n\x00", "x"} {
		data := []byte(`{"version":1,"subnet":"10.0.0.0/24","leases":[]}` + tail)
		if _, err := decodeFile(data); err == nil {
			t.Errorf("decodeFile accepted the object followed by %q", tail)
		}
		if json.Unmarshal(data, new(File)) == nil {
			t.Errorf("encoding/json accepts %q after the object: the test is wrong", tail)
		}
	}
	if _, err := decodeFile([]byte(`{"version":1}` + " \n\t\r")); err != nil {
		t.Errorf("trailing white space: %v", err)
	}
}
