package peer

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func testNotice() Notice {
	return Notice{From: "node-b", VM: "default/web", Pod: "default/virt-launcher-web-x7k2p", ResourceVersion: "4711", Sent: 1795000000123}
}

func TestSealOpen(t *testing.T) {
	b, err := Seal(testKey, testNotice())
	if err != nil {
		t.Fatal(err)
	}
	n, err := Open(testKey, b)
	if err != nil {
		t.Fatal(err)
	}
	if n != testNotice() {
		t.Errorf("opened %+v, sealed %+v", n, testNotice())
	}
	if got := n.SentAt().UnixMilli(); got != testNotice().Sent {
		t.Errorf("SentAt %d", got)
	}
}

// TestOpenRefuses: every change to a sealed notice, another key, and
// notices that are well signed but not well formed, are refused, each with
// its reason.
func TestOpenRefuses(t *testing.T) {
	good, err := Seal(testKey, testNotice())
	if err != nil {
		t.Fatal(err)
	}
	// Every byte flipped, one at a time.
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		if _, err := Open(testKey, b); err == nil {
			t.Fatalf("byte %d flipped: opened", i)
		}
	}
	signed := func(body string) []byte { return append([]byte(body), mac(testKey, []byte(body))...) }
	for _, c := range []struct {
		name string
		b    []byte
		key  []byte
		want string
	}{
		{"another key", good, []byte("another key of thirty-two bytes!"), "does not match"},
		{"truncated", good[:len(good)-1], testKey, "does not match"},
		{"MAC only", good[len(good)-32:], testKey, "too short"},
		{"too long", signed(`{"v":1,"from":"` + strings.Repeat("a", MaxSize) + `"}`), testKey, "at most"},
		{"version 2", signed(`{"v":2,"from":"node-b","vm":"default/web","pod":"default/p","rv":"1","sent":1}`), testKey, "version 2"},
		{"unknown member", signed(`{"v":1,"from":"node-b","vm":"default/web","pod":"default/p","rv":"1","sent":1,"node":"x"}`), testKey, "unknown field"},
		{"two objects", signed(`{"v":1,"from":"node-b","vm":"default/web","pod":"default/p","rv":"1","sent":1}{}`), testKey, "after the object"},
		{"no from", signed(`{"v":1,"vm":"default/web","pod":"default/p","rv":"1","sent":1}`), testKey, "from"},
		{"vm without namespace", signed(`{"v":1,"from":"node-b","vm":"web","pod":"default/p","rv":"1","sent":1}`), testKey, "NAMESPACE/NAME"},
		{"pod with two slashes", signed(`{"v":1,"from":"node-b","vm":"default/web","pod":"default/p/q","rv":"1","sent":1}`), testKey, "NAMESPACE/NAME"},
		{"no time", signed(`{"v":1,"from":"node-b","vm":"default/web","pod":"default/p","rv":"1"}`), testKey, "sent"},
		{"not JSON", signed(`vmlane`), testKey, "notice:"},
	} {
		_, err := Open(c.key, c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one saying %q", c.name, err, c.want)
		}
	}
}

func TestSealRefuses(t *testing.T) {
	n := testNotice()
	n.VM = "web"
	if _, err := Seal(testKey, n); err == nil {
		t.Error("sealed a VM without a namespace")
	}
	n = testNotice()
	n.Pod = strings.Repeat("n", 63) + "/" + strings.Repeat("p", 253)
	n.VM = strings.Repeat("n", 63) + "/" + strings.Repeat("v", 253)
	n.From = strings.Repeat("f", 253)
	n.ResourceVersion = strings.Repeat("1", 253)
	if _, err := Seal(testKey, n); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("sealed %v; want it too long", err)
	}
}

func TestReadKey(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "key")
	if err := os.WriteFile(good, append(bytes.Clone(testKey), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := ReadKey(good)
	if err != nil || !bytes.Equal(k, testKey) {
		t.Errorf("ReadKey = %q, %v", k, err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("  secret \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadKey(short); err == nil || !strings.Contains(err.Error(), "6 bytes") {
		t.Errorf("ReadKey of a short key: %v", err)
	}
	if _, err := ReadKey(filepath.Join(dir, "none")); !os.IsNotExist(err) {
		t.Errorf("ReadKey of no file: %v", err)
	}
}

// FuzzOpen: Open never panics, and a notice it opens seals again to one
// that opens the same (its members are what the MAC covered).
func FuzzOpen(f *testing.F) {
	good, _ := Seal(testKey, testNotice())
	f.Add(good)
	f.Add([]byte{})
	body, _ := json.Marshal(map[string]any{"v": 1, "from": "n", "vm": "a/b", "pod": "a/c", "rv": "1", "sent": 1})
	f.Add(append(body, mac(testKey, body)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := Open(testKey, b); err == nil {
			n, _ := Open(testKey, b)
			again, err := Seal(testKey, n)
			if err != nil {
				t.Fatalf("opened %+v, which does not seal: %v", n, err)
			}
			if m, err := Open(testKey, again); err != nil || m != n {
				t.Fatalf("opened %+v, sealed and opened %+v, %v", n, m, err)
			}
		}
		// The fuzzer cannot forge a MAC: signed, its input reaches the
		// decoder.
		signed := append(bytes.Clone(b), mac(testKey, b)...)
		if n, err := Open(testKey, signed); err == nil {
			if err := n.check(); err != nil {
				t.Fatalf("opened a notice that does not check: %v", err)
			}
		}
	})
}
