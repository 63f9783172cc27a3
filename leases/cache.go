package leases

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// parseCache remembers the last lease file a Store decoded or wrote, keyed
// by the file's bytes, so that an operation on a file nobody else changed
// since costs a read and a compare instead of a decode. In the DHCP server
// the store is the file's only writer most of the time, and the decode of a
// node's file (about 1 ms for 800 leases) used to dominate a bind.
//
// The key is the whole content, not the file's identity (device, inode,
// size, mtime). After a rename, the inode a writer's temp file gets is
// usually the one the file before last had (ext4 hands a freed inode out
// again at once), and mtime moves in clock ticks of up to 10 ms, so two
// quick writes by another process (a CNI ADD that fails and undoes its
// reservation) can leave a file of the same identity and size but other
// leases; a store that trusted the identity would then write its own
// change over that file and lose theirs. Equal bytes decode to an equal
// File whoever wrote them and whenever, so a hit is never stale, and the
// cache needs no invalidation for correctness: it is cleared after a failed
// write only so that nothing a failed write touched is ever reused.
//
// A hit costs reading the file into a recycled buffer and one bytes.Equal
// (tens of µs for a 266 KB file); the read is what a decode needs anyway.
//
// It holds two contents: the newest (cur) and the one before (prev). A
// Store records what it writes before the rename that publishes it, so
// readers that read the file in between, or while the writer's folder
// fsync runs, find the old bytes in prev and the new ones in cur: neither
// decodes. With one entry recorded after the write, every reader in that
// window (a DHCP lookup racing its own server's bind, 3,000 leases) missed
// and decoded the whole file, and often put the old content back.
type parseCache struct {
	mu sync.Mutex
	// cur and prev are the last two contents decoded or written, newest
	// first. Guarded by mu.
	cur, prev cached
	// spare is a read buffer no File aliases, kept for the next read.
	// Guarded by mu.
	spare []byte
	// decodes counts full decodes, for tests. Guarded by mu.
	decodes int
	// gen numbers contents: each one cached gets a new number, so equal
	// gens are equal bytes. Guarded by mu.
	gen uint64
}

// cached is one content of the file and what it decodes to.
type cached struct {
	// data is the content f was decoded from or encoded to. Strings of
	// decoded Files alias such buffers, so data is never written to or
	// recycled.
	data []byte
	// f is exactly what decodeOwned(data) gives: its result, or the File
	// a Store wrote as data when that round-trips; nil for an empty
	// entry. It is never modified and never handed out: callers get a
	// clone.
	f   *File
	gen uint64
}

// find returns the entry whose bytes are data, if any. c.mu must be held.
func (c *parseCache) find(data []byte) (cached, bool) {
	for _, e := range [...]cached{c.cur, c.prev} {
		if e.f != nil && bytes.Equal(data, e.data) {
			return e, true
		}
	}
	return cached{}, false
}

// push makes data and f the newest entry. c.mu must be held.
func (c *parseCache) push(data []byte, f *File) uint64 {
	c.gen++
	if c.cur.f != nil && !bytes.Equal(c.cur.data, data) {
		c.prev = c.cur
	}
	c.cur = cached{data: data, f: f, gen: c.gen}
	return c.gen
}

// read reads the file at path. When its content is the cached one it
// returns a private copy of the cached File and no data; otherwise it
// returns the content, which the caller owns, for the caller to decode
// (with c.decode, to cache the result). Errors are the os package's, as
// os.ReadFile returns them.
func (c *parseCache) read(path string) (data []byte, f *File, err error) {
	data, f, _, err = c.readCompare(path, true)
	return data, f, err
}

// readCompare reads the file at path into the spare buffer. When its bytes
// are the cached ones it returns their gen and, with clone, a private copy
// of the cached File, both taken under the same hold of c.mu as the
// compare, so they are exactly those bytes' (the cache may move on the
// moment c.mu is let go). Then, and when the read failed, the buffer goes
// back to spare; otherwise data is the caller's and gen is 0.
func (c *parseCache) readCompare(path string, clone bool) (data []byte, f *File, gen uint64, err error) {
	c.mu.Lock()
	buf := c.spare
	c.spare = nil
	c.mu.Unlock()
	data, err = readFileInto(path, buf)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.spare = data // nothing aliases a failed read's buffer
		return nil, nil, 0, err
	}
	if e, ok := c.find(data); ok {
		c.spare = data
		if clone {
			f = e.f.clone()
		}
		return nil, f, e.gen, nil
	}
	return data, nil, 0, nil
}

// decode decodes data (which it takes ownership of, as decodeOwned does),
// remembers the result and returns a private copy of it.
func (c *parseCache) decode(data []byte) (*File, error) {
	f, _, err := c.decodeGen(data, true)
	return f, err
}

// decodeGen is decode that also returns the gen it gave data, and copies
// the File out only with clone.
func (c *parseCache) decodeGen(data []byte, clone bool) (*File, uint64, error) {
	f, err := decodeOwned(data)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.decodes++
	if err != nil {
		return nil, 0, err
	}
	gen := c.push(data, f)
	if clone {
		f = f.clone()
	}
	return f, gen, nil
}

// wrote remembers f, which the caller is about to write to disk as data
// and hands over: nobody may modify either afterwards. It is remembered
// only when decoding data is certain to give back f exactly (see
// roundTrips); otherwise the cache is cleared and the next read decodes.
// A write that then fails clears the cache.
func (c *parseCache) wrote(data []byte, f *File) {
	if f.Leases == nil {
		// Encode writes a nil slice as [], which decodes to an empty
		// one; a later List must return what a decode returns.
		f.Leases = []Lease{}
	}
	ok := f.roundTrips()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok {
		c.cur, c.prev = cached{}, cached{}
		return
	}
	c.push(data, f)
}

// clear forgets the cached contents.
func (c *parseCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur, c.prev = cached{}, cached{}
}

// version reads the file at path and returns the gen of its content,
// decoding (and caching) it only when the bytes differ from the cached
// ones. Unlike read it hands out no File, so an unchanged file costs the
// read and the compare alone.
func (c *parseCache) version(path string) (uint64, error) {
	data, _, gen, err := c.readCompare(path, false)
	if err != nil || gen != 0 { // a cached content's gen is never 0
		return gen, err
	}
	_, gen, err = c.decodeGen(data, false)
	return gen, err
}

// clone returns a copy of f whose Leases a Tx may change (the elements hold
// no pointers a Tx writes through: strings, netip.Addr and time.Time are
// values) without touching f. A nil slice stays nil, as a decode of
// "leases":null leaves it.
func (f *File) clone() *File {
	c := *f
	if f.Leases != nil {
		// One spare element: the common change is a Reserve's append.
		c.Leases = make([]Lease, len(f.Leases), len(f.Leases)+1)
		copy(c.Leases, f.Leases)
	}
	return &c
}

// roundTrips reports whether decodeOwned(f.Encode()) gives back f field
// for field (==, not just Equal), so that a File just written may stand in
// for a decode of what was written. It is true of everything a Store
// writes but what no writer should produce: a file that fails validation
// (ErrCorrupt on the next read), a string that is not UTF-8 (encoding/json
// writes U+FFFD for the bad bytes), a time that is not UTC (decoding
// "+02:00" gives a different *time.Location, "Z" gives UTC) or carries a
// monotonic reading, or a year outside 0-9999 (which RFC 3339 cannot hold:
// the file would not decode). f must be sorted, as Encode leaves it.
func (f *File) roundTrips() bool {
	if f.Version != Version || f.Leases == nil || !utf8.ValidString(f.Node) || f.validate() != nil {
		return false
	}
	for i := range f.Leases {
		l := &f.Leases[i]
		for _, s := range [...]string{l.MAC, string(l.State), string(l.Source), l.ContainerID, l.IfName, l.NetNS, l.BridgePort, l.Pod.Namespace, l.Pod.Name, l.Pod.UID, l.Hostname, string(l.State6)} {
			if !utf8.ValidString(s) {
				return false
			}
		}
		if !canonicalTime(l.Created) || !canonicalTime(l.Expires) || !canonicalTime(l.Expires6) {
			return false
		}
	}
	return true
}

// canonicalTime reports whether t encodes and decodes back to itself: zero
// (omitted, decoded as zero), or UTC without a monotonic reading in a year
// RFC 3339 can write.
func canonicalTime(t time.Time) bool {
	if t.IsZero() {
		return t == time.Time{}
	}
	return t.Location() == time.UTC && t == t.Round(0) && !t.Before(minRFC3339) && t.Before(maxRFC3339)
}

// The years RFC 3339 can write: 0000 to 9999.
var (
	minRFC3339 = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	maxRFC3339 = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// readFileInto is os.ReadFile reading into buf's memory when it is large
// enough.
func readFileInto(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil {
		// Room for the whole file and a little growth, so that the read
		// that returns io.EOF needs no reallocation.
		if want := int(fi.Size()) + 512; cap(buf) < want {
			buf = make([]byte, 0, want)
		}
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// readFileString reads the file at path into a string without the copy
// a []byte to string conversion makes: a Builder grown to the file's size
// takes the reads and hands its buffer over as the string.
func readFileString(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var b strings.Builder
	if fi, err := f.Stat(); err == nil {
		b.Grow(int(fi.Size()) + 512)
	}
	var chunk [64 << 10]byte
	for {
		n, err := f.Read(chunk[:])
		b.Write(chunk[:n])
		if err == io.EOF {
			return b.String(), nil
		}
		if err != nil {
			return "", err
		}
	}
}
