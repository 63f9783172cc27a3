package leases

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"
)

// decodes returns how many full decodes s has made.
func (s *Store) decodes() int {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	return s.cache.decodes
}

// checkCacheIsTheFile fails unless each of s's cache entries, when set,
// is exactly (== field for field, time locations included) what decoding
// its bytes gives: the cache must be indistinguishable from a decode.
func checkCacheIsTheFile(t *testing.T, s *Store) {
	t.Helper()
	s.cache.mu.Lock()
	entries := []cached{s.cache.cur, s.cache.prev}
	s.cache.mu.Unlock()
	for _, e := range entries {
		if e.f == nil {
			continue
		}
		want, err := Decode(e.data)
		if err != nil {
			t.Fatalf("a cached file does not decode: %v", err)
		}
		if !reflect.DeepEqual(e.f, want) {
			t.Fatalf("cached file differs from its decode:\ncached:  %#v\ndecoded: %#v", e.f, want)
		}
	}
}

// TestCacheSkipsDecodes: once the store wrote the file, nothing it does
// decodes the file again until another writer changes it; after that one
// decode serves until the next foreign write.
func TestCacheSkipsDecodes(t *testing.T) {
	s, c := newStore(t, "10.1.0.0/24")
	var first Lease
	for i := range 10 {
		l := mustReserve(t, s, cniReq(fmt.Sprint("a", i)))
		if i == 0 {
			first = l
		}
	}
	if _, err := s.Bind("02:00:00:00:00:01", first.IP, c.t.Add(time.Hour), "vm-a0"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Release(Key{"a9", "eth0"}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	if _, err := s.List(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if n := s.decodes(); n != 0 {
		t.Fatalf("%d decodes of a file only this store wrote, want 0", n)
	}
	checkCacheIsTheFile(t, s)

	other, err := Open(s.Path(), s.Subnet(), s.Gateway(), WithNode("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	mustReserve(t, other, cniReq("b"))
	ls, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := findKey(ls, Key{"b", "eth0"}); !ok {
		t.Fatalf("the other store's reservation is missing: %v", ips(ls))
	}
	if n := s.decodes(); n != 1 {
		t.Fatalf("%d decodes after one foreign write, want 1", n)
	}
	// The decode is remembered: reads, and an Update that writes nothing,
	// reuse it.
	s.List()
	s.Snapshot()
	mustReserve(t, s, cniReq("b")) // idempotent: no write
	if n := s.decodes(); n != 1 {
		t.Fatalf("%d decodes, want still 1", n)
	}
	checkCacheIsTheFile(t, s)
}

func findKey(ls []Lease, k Key) (Lease, bool) {
	for _, l := range ls {
		if l.Source == SourceCNI && l.Key() == k {
			return l, true
		}
	}
	return Lease{}, false
}

// TestAlternatingStoresNeverSeeStaleFiles: two stores on one file (as the
// DHCP server and the CNI plugin in other processes) take turns, each
// change small and many of the same size, quick enough that files share an
// mtime tick and (on ext4) alternate between two inode numbers: a cache
// keyed by the file's identity would return an old file here. Every turn
// checks both stores against a model of what the file must hold.
func TestAlternatingStoresNeverSeeStaleFiles(t *testing.T) {
	p := netip.MustParsePrefix("10.7.0.0/24")
	c := &clock{t: t0}
	path := t.TempDir() + "/leases.json"
	var stores [2]*Store
	for i := range stores {
		s, err := Open(path, p, p.Addr().Next(), WithNode("node-a"), WithClock(c.now))
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	rng := rand.New(rand.NewPCG(1, 2))
	model := map[Key]Lease{} // what the file must hold
	// Ten leases of the same shape, so reserve/release/bind turns often
	// leave a file of the same size as the one before last.
	keys := make([]Key, 10)
	for i := range keys {
		keys[i] = Key{ContainerID: fmt.Sprintf("c%02d", i), IfName: "eth0"}
	}
	for turn := range 400 {
		s := stores[turn%2]
		k := keys[rng.IntN(len(keys))]
		switch l, held := model[k]; {
		case !held:
			req := cniReq(k.ContainerID)
			req.MAC = fmt.Sprintf("02:00:00:00:%02x:%02x", turn/256, turn%256)
			got, err := s.Reserve(req)
			if err != nil {
				t.Fatalf("turn %d: reserve %v: %v", turn, k, err)
			}
			model[k] = got
		case rng.IntN(2) == 0:
			if _, ok, err := s.Release(k); !ok || err != nil {
				t.Fatalf("turn %d: store %d does not see lease %v (%v): stale file", turn, turn%2, k, err)
			}
			delete(model, k)
		default:
			// Same-size rewrite: flip the expiry between two times of
			// the same length.
			exp := t0.Add(time.Duration(1+turn%2) * time.Hour)
			got, err := s.Bind(l.MAC, l.IP, exp, "")
			if err != nil {
				t.Fatalf("turn %d: bind %v: %v", turn, k, err)
			}
			model[k] = got
		}
		for i, s := range stores {
			ls, err := s.List()
			if err != nil {
				t.Fatal(err)
			}
			var want []Lease
			for _, l := range model {
				want = append(want, l)
			}
			slices.SortFunc(want, func(a, b Lease) int { return a.IP.Compare(b.IP) })
			if !reflect.DeepEqual(ls, want) && !(len(ls) == 0 && len(want) == 0) {
				t.Fatalf("turn %d: store %d lists\n%v\nwant\n%v", turn, i, ls, want)
			}
			snap, err := s.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(snap.Leases(), ls) {
				t.Fatalf("turn %d: store %d: Snapshot and List differ", turn, i)
			}
			checkCacheIsTheFile(t, s)
		}
	}
}

// TestCacheIgnoresFileIdentity: a change that keeps the file's inode, size
// and mtime (an in-place edit whose mtime was put back, the worst case of
// inode reuse within one mtime tick) is still seen.
func TestCacheIgnoresFileIdentity(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	l := mustReserve(t, s, ReserveRequest{Key: Key{"a", "eth0"}, MAC: "02:00:00:00:00:aa"})
	before, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(s.Path())
	edited := []byte(string(data))
	i := indexOf(edited, "02:00:00:00:00:aa")
	copy(edited[i:], "02:00:00:00:00:bb")
	fd, err := os.OpenFile(s.Path(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fd.WriteAt(edited, 0); err != nil {
		t.Fatal(err)
	}
	fd.Close()
	if err := os.Chtimes(s.Path(), before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(s.Path())
	if !os.SameFile(before, after) || before.Size() != after.Size() || !before.ModTime().Equal(after.ModTime()) {
		t.Fatalf("test setup: the file's identity changed")
	}
	got, ok, err := s.Get(l.Key())
	if err != nil || !ok || got.MAC != "02:00:00:00:00:bb" {
		t.Fatalf("Get after an identity-preserving edit = %+v, %v, %v; want MAC 02:00:00:00:00:bb", got, ok, err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := snap.ByIP(l.IP); !ok || got.MAC != "02:00:00:00:00:bb" {
		t.Fatalf("Snapshot after an identity-preserving edit: %+v", got)
	}
}

func indexOf(b []byte, s string) int {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return i
		}
	}
	return -1
}

// TestCacheAfterCorruption: a file that another hand made unreadable is
// refused exactly as without the cache, even though the store had just
// written (and cached) the previous version; once repaired, it is read.
func TestCacheAfterCorruption(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	mustReserve(t, s, cniReq("a"))
	good, _ := os.ReadFile(s.Path())
	for name, content := range map[string]string{
		"garbage":   "{not json",
		"version":   `{"version":3,"subnet":"10.1.0.0/24","leases":[]}`,
		"truncated": string(good[:len(good)-3]),
	} {
		os.WriteFile(s.Path(), []byte(content), 0o644)
		if _, err := s.Reserve(cniReq("b")); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Reserve = %v, want ErrCorrupt", name, err)
		}
		if _, err := s.List(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: List = %v, want ErrCorrupt", name, err)
		}
		_, err := s.Snapshot()
		_, want := Read(s.Path())
		if err == nil || want == nil || err.Error() != want.Error() {
			t.Errorf("%s: Snapshot error %v, want Read's %v", name, err, want)
		}
	}
	os.WriteFile(s.Path(), good, 0o644)
	if ls, err := s.List(); err != nil || len(ls) != 1 {
		t.Fatalf("after repair: %v %v", ips(ls), err)
	}
}

// TestWrittenFilesThatDoNotRoundTripAreNotCached: what a decode of the
// written bytes would not give back exactly is not served from memory; the
// next operation sees what every other reader sees.
func TestWrittenFilesThatDoNotRoundTripAreNotCached(t *testing.T) {
	s, c := newStore(t, "10.1.0.0/24")
	l := mustReserve(t, s, ReserveRequest{Key: Key{"a", "eth0"}, MAC: "02:00:00:00:00:aa"})
	if _, err := s.Bind(l.MAC, l.IP, c.t.Add(time.Hour), "bad\xffname"); err != nil {
		t.Fatal(err)
	}
	n := s.decodes()
	got, _, err := s.Get(l.Key())
	if err != nil {
		t.Fatal(err)
	}
	if got.Hostname != "bad\uFFFDname" {
		t.Errorf("hostname = %q, want what a decode gives, %q", got.Hostname, "bad\uFFFDname")
	}
	if s.decodes() != n+1 {
		t.Errorf("a file whose strings are not UTF-8 was served from memory")
	}
	checkCacheIsTheFile(t, s)
}

func TestRoundTrips(t *testing.T) {
	p := netip.MustParsePrefix("10.1.0.0/24")
	base := func() *File {
		return &File{Version: Version, Node: "n", Subnet: p, Gateway: netip.MustParseAddr("10.1.0.1"), Leases: []Lease{{
			MAC: "02:00:00:00:00:01", IP: netip.MustParseAddr("10.1.0.2"), State: StateBound, Source: SourceCNI,
			ContainerID: "c", IfName: "eth0", Pod: Pod{Namespace: "é<&>", Name: "\u2028"}, Hostname: "h\n",
			Created: t0, Expires: t0.Add(time.Hour + 500*time.Millisecond),
		}}}
	}
	paris := time.FixedZone("CET", 3600)
	for name, tc := range map[string]struct {
		edit func(f *File)
		want bool
	}{
		"store-written": {func(f *File) {}, true},
		"no leases":     {func(f *File) { f.Leases = []Lease{} }, true},
		"nil leases":    {func(f *File) { f.Leases = nil }, false},
		"invalid utf8":  {func(f *File) { f.Leases[0].NetNS = "\xc3" }, false},
		"offset time":   {func(f *File) { f.Leases[0].Expires = t0.In(paris) }, false},
		"local time":    {func(f *File) { f.Leases[0].Created = t0.Local() }, false},
		"monotonic":     {func(f *File) { f.Leases[0].Created = time.Now() }, false},
		"year 10000":    {func(f *File) { f.Leases[0].Expires = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, false},
		"zero time+loc": {func(f *File) { f.Leases[0].Expires = time.Time{}.In(paris) }, false},
		"duplicate IP":  {func(f *File) { f.Leases = append(f.Leases, f.Leases[0]) }, false},
		"unknown state": {func(f *File) { f.Leases[0].State = "x" }, true},
		"no state":      {func(f *File) { f.Leases[0].State = "" }, false},
		"version 3":     {func(f *File) { f.Version = 3 }, false},
		"non-utf8 node": {func(f *File) { f.Node = "\xff" }, false},
		"no gateway":    {func(f *File) { f.Gateway = netip.Addr{} }, true},
		"last reserved": {func(f *File) { f.LastReserved = netip.MustParseAddr("10.1.0.2") }, true},
		"unknown members": {func(f *File) {
			f.Unknown = UnknownMembers{`"g":1,"h" : {"i":[true]}`}
			f.Leases[0].Unknown = UnknownMembers{`"v":"\u00e9"`}
			f.Leases[0].Pod = Pod{Unknown: UnknownMembers{`"tier":"gold"`}}
		}, true},
		"dhcp, no extra": {func(f *File) {
			f.Leases[0] = Lease{MAC: "02:00:00:00:00:01", IP: netip.MustParseAddr("10.1.0.9"), State: StateReserved, Source: SourceDHCP}
		}, true},
	} {
		t.Run(name, func(t *testing.T) {
			f := base()
			tc.edit(f)
			data, err := f.Encode()
			if err != nil {
				t.Fatal(err)
			}
			got := f.roundTrips()
			if got != tc.want {
				t.Fatalf("roundTrips = %v, want %v", got, tc.want)
			}
			if got {
				// The property roundTrips promises.
				dec, err := Decode(data)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if !reflect.DeepEqual(dec, f) {
					t.Fatalf("decode differs:\n%#v\n%#v", dec, f)
				}
			}
		})
	}
}

// TestTxChangesDoNotReachTheCache: a transaction that changes the file and
// then fails, or that changes it without writing, leaves the remembered
// file as it was.
func TestTxChangesDoNotReachTheCache(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	l := mustReserve(t, s, ReserveRequest{Key: Key{"a", "eth0"}, MAC: "02:00:00:00:00:aa"})
	boom := errors.New("boom")
	err := s.Update(func(tx *Tx) error {
		tx.Bind(l.MAC, l.IP, t0.Add(time.Hour), "x")
		tx.Reserve(cniReq("b"))
		tx.Release(l.Key())
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	// A View may not write, but a Reserve moves the cursor before it
	// finds out.
	func() {
		defer func() { recover() }()
		s.View(func(tx *Tx) error { tx.Reserve(cniReq("c")); return nil })
	}()
	ls, err := s.List()
	if err != nil || len(ls) != 1 || ls[0] != l {
		t.Fatalf("after failed transactions: %+v, %v; want only %+v", ls, err, l)
	}
	checkCacheIsTheFile(t, s)
	if s.decodes() != 0 {
		t.Errorf("decodes = %d, want 0", s.decodes())
	}
}

// FuzzRoundTrips holds roundTrips to its promise on files with arbitrary
// strings and times: whenever it says a written File may stand in for the
// decode of its bytes, the decode gives back exactly that File.
func FuzzRoundTrips(f *testing.F) {
	f.Add("vm-a", "/var/run/netns/x", int64(1795000000), int64(0), 0, false)
	f.Add("bad\xff", "é<&>\u2028", int64(-62135596800), int64(5), 3600, true)
	f.Add("", "\x00\x7f", int64(253402300800), int64(999999999), -1, false)
	f.Fuzz(func(t *testing.T, host, netns string, sec, nsec int64, offset int, local bool) {
		tm := time.Unix(sec, nsec).UTC()
		switch {
		case local:
			tm = tm.Local()
		case offset != 0:
			tm = tm.In(time.FixedZone("", offset))
		}
		file := &File{Version: Version, Node: host, Subnet: netip.MustParsePrefix("10.1.0.0/24"), Leases: []Lease{{
			MAC: "02:00:00:00:00:01", IP: netip.MustParseAddr("10.1.0.2"), State: StateBound, Source: SourceDHCP,
			NetNS: netns, Hostname: host, Pod: Pod{UID: netns}, Created: tm, Expires: tm.Add(time.Hour),
		}}}
		data, err := file.Encode()
		if err != nil {
			t.Skip()
		}
		if !file.roundTrips() {
			return
		}
		dec, err := Decode(data)
		if err != nil {
			t.Fatalf("roundTrips, but the bytes do not decode: %v\n%s", err, data)
		}
		if !reflect.DeepEqual(dec, file) {
			t.Fatalf("roundTrips, but the decode differs:\n%#v\n%#v", dec, file)
		}
	})
}

// TestCacheKeepsThePreviousContent: a reader that reads the file as it was
// before the store's last write (it read before the rename, or while the
// writer fsynced the folder) finds that content cached too, so the DHCP
// server's lookups racing its own binds do not decode; the write is
// recorded before it is published, so a reader of the new file finds it.
func TestCacheKeepsThePreviousContent(t *testing.T) {
	s, _ := newStore(t, "10.1.0.0/24")
	mustReserve(t, s, cniReq("a"))
	before, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	mustReserve(t, s, cniReq("b"))
	after, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	n := s.decodes()
	for _, content := range [][]byte{before, after, before} {
		if err := os.WriteFile(s.Path()+".tmp", content, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(s.Path()+".tmp", s.Path()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.decodes(); got != n {
		t.Errorf("%d decodes reading the last two contents this store wrote, want none", got-n)
	}
	checkCacheIsTheFile(t, s)
}
