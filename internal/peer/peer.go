// Package peer is the notice one vmlaned sends every other node's when it
// hears a live-migrated guest on its bridge: "VM NAMESPACE/NAME runs here
// now, in pod P; its claim was at resourceVersion RV". The claim's update
// through the API server follows; the notice lets the other nodes move the
// VM's routes before it arrives (docs/vm-identity.md says how each node
// checks and uses one, docs/security.md who can send one).
//
// A notice is one UDP datagram: a JSON object, then HMAC-SHA256 of it under
// the cluster's peer key (a Secret every node's vmlaned mounts). Seal makes
// one, Open checks one; neither looks at the clock or the cluster, which is
// the receiver's part. Standard library only.
package peer

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// DefaultPort is the UDP port vmlaned receives notices on (--peer-port).
const DefaultPort = 9466

// DefaultKeyFile is where vmlaned looks for the key (--peer-key-file):
// where the DaemonSet mounts the Secret vmlane-peer, so that its pod
// needs no flag for it (an older vmlaned, rolled back to by its image
// alone, would refuse a flag it does not know).
const DefaultKeyFile = "/etc/vmlane/peer/key"

// MaxSize is the largest notice Open takes: it fits one datagram on any
// link (IPv6's minimum MTU, 1280, less the IPv6 and UDP headers). A
// notice of the longest names Kubernetes allows would not (Seal says so,
// and the claim's update alone moves that VM); real ones take 200 bytes.
const MaxSize = 1232

// maxMember is the longest member: NAMESPACE/NAME, a namespace of at
// most 63 bytes and a name of at most 253.
const maxMember = 63 + 1 + 253

// MinKeyLen is the shortest key ReadKey takes: 32 bytes, HMAC-SHA256's
// block of security.
const MinKeyLen = 32

// version is the only notice format Open takes.
const version = 1

// domain separates a notice's MAC from any other use of the key.
const domain = "vmlane-peer-notice\x00"

// Notice is what a node tells the others when it hears a migrated guest.
type Notice struct {
	// From is the sending node's name: the VM runs there now. A receiver
	// takes a notice only from an address of that Node.
	From string `json:"from"`
	// VM is the VM, NAMESPACE/NAME (its VMClaim's namespace and name).
	VM string `json:"vm"`
	// Pod is the VM's pod on From, NAMESPACE/NAME.
	Pod string `json:"pod"`
	// ResourceVersion is the claim's resourceVersion as From read it,
	// which its update is made against: a receiver uses the notice only
	// while its copy of the claim is that version.
	ResourceVersion string `json:"rv"`
	// Sent is when From sent it (Unix milliseconds on its clock).
	Sent int64 `json:"sent"`
}

type wire struct {
	V int `json:"v"`
	Notice
}

// Seal encodes n and appends its MAC under key.
func Seal(key []byte, n Notice) ([]byte, error) {
	if err := n.check(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(wire{V: version, Notice: n})
	if err != nil {
		return nil, err
	}
	out := append(body, mac(key, body)...)
	if len(out) > MaxSize {
		return nil, fmt.Errorf("notice of %d bytes: at most %d", len(out), MaxSize)
	}
	return out, nil
}

// Open checks b's MAC under key and decodes it. It says why it refuses
// one: too short or long, a MAC that does not match, another version, a
// member missing or not a name.
func Open(key, b []byte) (Notice, error) {
	if len(b) > MaxSize {
		return Notice{}, fmt.Errorf("notice of %d bytes: at most %d", len(b), MaxSize)
	}
	if len(b) <= sha256.Size {
		return Notice{}, fmt.Errorf("notice of %d bytes: too short", len(b))
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if !hmac.Equal(sum, mac(key, body)) {
		return Notice{}, errors.New("notice's MAC does not match: another key, or not a notice")
	}
	var w wire
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&w); err != nil {
		return Notice{}, fmt.Errorf("notice: %w", err)
	}
	if d.More() {
		return Notice{}, errors.New("notice: data after the object")
	}
	if w.V != version {
		return Notice{}, fmt.Errorf("notice version %d: this vmlaned reads version %d", w.V, version)
	}
	if err := w.Notice.check(); err != nil {
		return Notice{}, err
	}
	return w.Notice, nil
}

// check says what makes n unusable: a member empty or too long, or a VM
// or pod that is not NAMESPACE/NAME.
func (n Notice) check() error {
	for _, f := range []struct{ name, v string }{{"from", n.From}, {"vm", n.VM}, {"pod", n.Pod}, {"rv", n.ResourceVersion}} {
		if f.v == "" || len(f.v) > maxMember {
			return fmt.Errorf("notice's %s %q: want 1 to %d bytes", f.name, f.v, maxMember)
		}
	}
	for _, f := range []struct{ name, v string }{{"vm", n.VM}, {"pod", n.Pod}} {
		ns, name, ok := strings.Cut(f.v, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("notice's %s %q: want NAMESPACE/NAME", f.name, f.v)
		}
	}
	if n.Sent <= 0 {
		return fmt.Errorf("notice's sent %d: want a time", n.Sent)
	}
	return nil
}

// SentAt is n.Sent as a time.
func (n Notice) SentAt() time.Time { return time.UnixMilli(n.Sent) }

func mac(key, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(domain))
	h.Write(body)
	return h.Sum(nil)
}

// ReadKey reads the peer key from path (a Secret's key, mounted): its
// bytes less surrounding white space, at least MinKeyLen of them.
func ReadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key := bytes.TrimSpace(b)
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("peer key %s has %d bytes: want at least %d (head -c 32 /dev/urandom | base64)", path, len(key), MinKeyLen)
	}
	return key, nil
}
