package leases_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/leases"
)

// Benchmarks for `make bench`. Each reports a rate with b.ReportMetric, so
// internal/bench/benchtable can put the store's write rate beside the rate of the
// bare atomic-write sequence (the fsync floor) and print the ratio:
//
//	go test -run='^$' -bench=. ./leases | go run ./internal/bench/benchtable
//
// A store write is one Reserve or one Release; a reserve+release op is two.
//
// The fsync latency of a shared or virtual disk drifts by a factor of two
// or three within a minute, so a floor measured by another benchmark at
// another moment makes a noisy ratio. Each store benchmark therefore also
// measures the floor itself, in the same folder, with as many writes as it
// made, half just before its timed part and half just after, and reports it
// as "floor-writes/s".

// benchLeases is the size of a typical node's file: the write benchmarks
// keep this many leases in it, and BenchmarkWriteFloor writes a payload of
// the same size.
const benchLeases = 16

// realisticFile returns a lease file of n bound CNI leases shaped like real
// ones: a 64-hex container ID, pod namespace, name and UID, a netns path.
func realisticFile(n int, subnet netip.Prefix) *leases.File {
	now := time.Now().UTC().Truncate(time.Second)
	f := &leases.File{Version: leases.Version, Node: "node-a", Subnet: subnet, Gateway: gatewayOf(subnet)}
	ip := gatewayOf(subnet)
	for i := range n {
		ip = ip.Next()
		f.Leases = append(f.Leases, leases.Lease{
			MAC: macFor(ip), IP: ip, State: leases.StateBound, Source: leases.SourceCNI,
			ContainerID: fmt.Sprintf("%064x", uint64(i)*0x9e3779b97f4a7c15),
			IfName:      "eth0",
			NetNS:       fmt.Sprintf("/var/run/netns/cni-%08x-%04x-%04x-%04x-%012x", i, i, i, i, i),
			Pod:         leases.Pod{Namespace: "vms", Name: fmt.Sprintf("vm-%05d", i), UID: fmt.Sprintf("5b1e7c2d-%04x-4000-8000-%012x", i%0x10000, i)},
			Hostname:    fmt.Sprintf("vm-%05d", i),
			Created:     now,
			Expires:     now.Add(24 * time.Hour),
		})
	}
	f.LastReserved = ip
	return f
}

func encodeFile(tb testing.TB, f *leases.File) []byte {
	tb.Helper()
	data, err := f.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// writeAtomicFloor is the store's write sequence and nothing else: temp file
// in the same folder, write, fsync, rename, fsync the folder.
func writeAtomicFloor(path string, data []byte) error {
	if err := replaceFloor(path, data); err != nil {
		return err
	}
	return syncDirFloor(filepath.Dir(path))
}

// replaceFloor is writeAtomicFloor up to the rename: what a Store does
// holding the lease file's lock.
func replaceFloor(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// syncDirFloor is writeAtomicFloor's last step, the folder's fsync, which
// a Store makes after it lets the lock go.
func syncDirFloor(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// pairedFloor measures the write floor beside a store benchmark: n writes
// of a typical file's size in dir. It runs outside the benchmark's timer.
func pairedFloor(b *testing.B, dir string, n int) time.Duration {
	b.Helper()
	data := encodeFile(b, realisticFile(benchLeases, netip.MustParsePrefix("10.244.3.0/24")))
	path := filepath.Join(dir, "floor.json")
	start := time.Now()
	for range n {
		if err := writeAtomicFloor(path, data); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

func reportFloor(b *testing.B, writes int, d time.Duration) {
	if d > 0 {
		b.ReportMetric(float64(writes)/d.Seconds(), "floor-writes/s")
	}
}

func reportRate(b *testing.B, writesPerOp int) {
	secs := b.Elapsed().Seconds()
	if secs == 0 {
		return
	}
	ops := float64(b.N) / secs
	if writesPerOp > 1 {
		b.ReportMetric(ops, "ops/s")
	}
	b.ReportMetric(ops*float64(writesPerOp), "writes/s")
	b.ReportMetric(secs*1e9/float64(b.N*writesPerOp), "ns/write")
}

func BenchmarkWriteFloor(b *testing.B) {
	path := filepath.Join(b.TempDir(), "leases.json")
	data := encodeFile(b, realisticFile(benchLeases, netip.MustParsePrefix("10.244.3.0/24")))
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		if err := writeAtomicFloor(path, data); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRate(b, 1)
}

// benchStore opens a store on a fresh file that already holds
// benchLeases-1 leases, so that with the one the benchmark reserves the file
// has the floor's size.
func benchStore(b *testing.B) *leases.Store {
	b.Helper()
	subnet := netip.MustParsePrefix("10.244.3.0/24")
	path := filepath.Join(b.TempDir(), "leases.json")
	f := realisticFile(benchLeases-1, subnet)
	if err := os.WriteFile(path, encodeFile(b, f), 0o644); err != nil {
		b.Fatal(err)
	}
	s, err := leases.Open(path, subnet, gatewayOf(subnet), leases.WithNode("node-a"))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func benchReq(cid string) leases.ReserveRequest {
	return leases.ReserveRequest{
		Key:    leases.Key{ContainerID: cid, IfName: "eth0"},
		MACFor: macFor,
		NetNS:  "/var/run/netns/cni-" + cid,
		Pod:    leases.Pod{Namespace: "vms", Name: "vm-" + cid, UID: "5b1e7c2d-0000-4000-8000-" + cid},
	}
}

func reserveRelease(s *leases.Store, cid string) error {
	req := benchReq(cid)
	if _, err := s.Reserve(req); err != nil {
		return err
	}
	if _, ok, err := s.Release(req.Key); err != nil || !ok {
		return fmt.Errorf("release %s: found=%v, %v", cid, ok, err)
	}
	return nil
}

// BenchmarkReserveRelease is one writer in this process; an op is a
// Reserve and a Release, two writes.
func BenchmarkReserveRelease(b *testing.B) {
	s := benchStore(b)
	dir := filepath.Dir(s.Path())
	floor := pairedFloor(b, dir, b.N)
	b.ResetTimer()
	for i := range b.N {
		if err := reserveRelease(s, benchCID(0xa0000000, i)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	floor += pairedFloor(b, dir, b.N)
	checkBenchFile(b, s)
	reportRate(b, 2)
	reportFloor(b, 2*b.N, floor)
}

// benchCID is the container ID of a benchmark's op: 64 hex digits, as
// runtimes make them, that never equal realisticFile's (whose first 48
// digits are zero), since Reserve of an ID already held returns that lease.
func benchCID(writer uint32, i int) string { return fmt.Sprintf("%08x%056x", writer, i) }

// checkBenchFile checks that a benchmark released what it reserved and
// nothing else.
func checkBenchFile(b *testing.B, s *leases.Store) {
	b.Helper()
	if ls, err := s.List(); err != nil || len(ls) != benchLeases-1 {
		b.Fatalf("after the run the file holds %d leases (%v), want the %d it started with", len(ls), err, benchLeases-1)
	}
}

// dhcpLeases is the size of internal/bench/dhcpbench's file: 833 reservations
// (266 KB), a node's worth of VMs.
const dhcpLeases = 833

// BenchmarkDHCPBind833 is the lease store's share of one DHCP exchange as
// vmlaned serves it, on a file of dhcpLeases leases of which this store is
// the only writer (no CNI call running): a lookup of the client's lease,
// then a bind that writes. An op is one write. The paired floor writes a
// file of the same size.
func BenchmarkDHCPBind833(b *testing.B) {
	subnet := netip.MustParsePrefix("10.252.0.0/22")
	f := realisticFile(dhcpLeases, subnet)
	data := encodeFile(b, f)
	path := filepath.Join(b.TempDir(), "leases.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	s, err := leases.Open(path, subnet, gatewayOf(subnet), leases.WithNode("node-a"))
	if err != nil {
		b.Fatal(err)
	}
	floorPath := filepath.Join(filepath.Dir(path), "floor.json")
	var floorCPU time.Duration
	floor := func(n int) time.Duration {
		start, cpu := time.Now(), processCPU()
		for range n {
			if err := writeAtomicFloor(floorPath, data); err != nil {
				b.Fatal(err)
			}
		}
		floorCPU += processCPU() - cpu
		return time.Since(start)
	}
	fl := floor(max(b.N/2, 1))
	expires := time.Now().UTC().Truncate(time.Second).Add(time.Hour)
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for i := range b.N {
		want := f.Leases[(i*2654435761)%len(f.Leases)]
		var l leases.Lease
		var ok bool
		if err := s.View(func(tx *leases.Tx) error {
			l, ok = tx.ByMAC(want.MAC)
			return nil
		}); err != nil || !ok || l.IP != want.IP {
			b.Fatalf("lookup of %s: %v %v %v", want.MAC, l.IP, ok, err)
		}
		// A new expiry every op, so every bind writes.
		if _, err := s.Bind(want.MAC, want.IP, expires.Add(time.Duration(i)*time.Second), want.Hostname); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// The write's wall time is mostly fsync, which drifts on a shared
	// disk; the CPU it costs (GC included) is what the store controls.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/write")
	fl += floor(max(b.N/2, 1))
	b.ReportMetric(float64(floorCPU)/float64(2*max(b.N/2, 1)), "floor-cpu-ns/write")
	reportRate(b, 1)
	reportFloor(b, 2*max(b.N/2, 1), fl)
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readBench4096 sets up a 4,096-lease file in a /19 and returns it with the
// MACs to look up.
func readBench4096(b *testing.B) (path string, f *leases.File) {
	b.Helper()
	f = realisticFile(4096, netip.MustParsePrefix("10.20.0.0/19"))
	path = filepath.Join(b.TempDir(), "leases.json")
	if err := writeAtomicFloor(path, encodeFile(b, f)); err != nil {
		b.Fatal(err)
	}
	return path, f
}

// BenchmarkReadByMAC4096 is a VM runtime's lookup: read the file, find a
// MAC's lease. It cycles through the MACs, so a lookup scans half the file
// on average if the snapshot scans.
func BenchmarkReadByMAC4096(b *testing.B) {
	path, f := readBench4096(b)
	b.ResetTimer()
	for i := range b.N {
		want := f.Leases[(i*2654435761)%len(f.Leases)]
		snap, err := leases.Read(path)
		if err != nil {
			b.Fatal(err)
		}
		l, ok := snap.ByMAC(want.MAC)
		if !ok || l.IP != want.IP {
			b.Fatalf("ByMAC(%s) = %s %v, want %s", want.MAC, l.IP, ok, want.IP)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
}

// BenchmarkReadByMAC4096Rewritten replaces the file (a new inode, as the
// store's rename makes) before every read, outside the timer, alternating
// between two versions that give one lease a different MAC. A reader that
// cached by inode, or by anything but the content, would return the old
// version's answer and fail.
func BenchmarkReadByMAC4096Rewritten(b *testing.B) {
	path, f := readBench4096(b)
	k := len(f.Leases) / 2
	target := f.Leases[k]
	var versions [2][]byte
	var macs [2]string
	for v := range versions {
		macs[v] = fmt.Sprintf("52:54:00:00:00:%02x", v)
		f.Leases[k].MAC = macs[v]
		versions[v] = encodeFile(b, f)
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		v := i % 2
		if err := writeAtomicFloor(path, versions[v]); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		snap, err := leases.Read(path)
		if err != nil {
			b.Fatal(err)
		}
		if l, ok := snap.ByMAC(macs[v]); !ok || l.IP != target.IP {
			b.Fatalf("read %d: ByMAC(%s) = %s %v, want %s: the reader returned a stale file", i, macs[v], l.IP, ok, target.IP)
		}
		if l, ok := snap.ByMAC(macs[1-v]); ok {
			b.Fatalf("read %d: ByMAC(%s) = %s, a MAC of the replaced file: the reader returned a stale file", i, macs[1-v], l.IP)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
}

// BenchmarkDecode4096 is the decode alone, without the disk: the part of
// every Read and every store operation on a changed file that the codec
// controls. withUnknown is the same file as a newer writer would leave it,
// with a member this version does not know at the file level, in every
// lease and in every pod. encoding-json is the reference of the same run:
// the reflection decode the codec replaced.
func BenchmarkDecode4096(b *testing.B) {
	f := realisticFile(4096, netip.MustParsePrefix("10.20.0.0/19"))
	plain := encodeFile(b, f)
	withUnknown := strings.ReplaceAll(string(plain), `"},"hostname"`, `","tier":"gold"},"hostname"`)
	withUnknown = strings.ReplaceAll(withUnknown, "Z\"}", "Z\",\"vlan\":{\"id\":7,\"trunk\":[1,2]}}")
	withUnknown = strings.TrimSuffix(withUnknown, "}\n") + `,"generation":42}` + "\n"
	for _, bc := range []struct {
		name string
		data []byte
	}{{"plain", plain}, {"withUnknown", []byte(withUnknown)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.data)))
			b.ReportAllocs()
			for range b.N {
				got, err := leases.Decode(bc.data)
				if err != nil {
					b.Fatal(err)
				}
				if len(got.Leases) != len(f.Leases) {
					b.Fatalf("decoded %d leases, want %d", len(got.Leases), len(f.Leases))
				}
			}
		})
	}
	// The reference, measured in the same run: encoding/json's
	// reflection decode of the plain file into the same File (without
	// the validation Decode adds), what the codec replaced.
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		b.ReportAllocs()
		for range b.N {
			var got leases.File
			if err := json.Unmarshal(plain, &got); err != nil {
				b.Fatal(err)
			}
			if len(got.Leases) != len(f.Leases) {
				b.Fatalf("decoded %d leases, want %d", len(got.Leases), len(f.Leases))
			}
		}
	})
}
