package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// msSeq returns latencies of 1ms, 2ms, … n ms, shuffled so that quantile
// must sort them.
func msSeq(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration((i*7)%n+1) * time.Millisecond
	}
	return out
}

func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		n    int
		q    float64
		want time.Duration
	}{
		{n: 1, q: 0.50, want: 1 * time.Millisecond},
		{n: 1, q: 0.99, want: 1 * time.Millisecond},
		{n: 2, q: 0.50, want: 1 * time.Millisecond},
		{n: 100, q: 0.50, want: 50 * time.Millisecond},
		{n: 100, q: 0.99, want: 99 * time.Millisecond},
		{n: 200, q: 0.99, want: 198 * time.Millisecond},
		{n: 50, q: 0.99, want: 50 * time.Millisecond},
		{n: 0, q: 0.50, want: 0},
	} {
		s := series{Lat: msSeq(tc.n)}
		if got := s.quantile(tc.q); got != tc.want {
			t.Errorf("quantile(%v) of %d samples = %v, want %v", tc.q, tc.n, got, tc.want)
		}
	}
}

func TestOpsPerSec(t *testing.T) {
	lat := []time.Duration{10 * time.Millisecond, 30 * time.Millisecond} // mean 20ms
	for _, tc := range []struct {
		workers int
		want    float64
	}{{1, 50}, {16, 800}} {
		if got := (series{Workers: tc.workers, Lat: lat}).opsPerSec(); got != tc.want {
			t.Errorf("opsPerSec with %d workers = %v, want %v", tc.workers, got, tc.want)
		}
	}
}

func TestTables(t *testing.T) {
	d := func(ms ...int) []time.Duration {
		var out []time.Duration
		for _, m := range ms {
			out = append(out, time.Duration(m)*time.Millisecond)
		}
		return out
	}
	ss := []series{
		{Plugin: "vmlane", Mode: "sequential", Op: "ADD", Workers: 1, Lat: d(10, 20)},
		{Plugin: "vmlane", Mode: "sequential", Op: "DEL", Workers: 1, Lat: d(30, 50)},
		{Plugin: "ref", Mode: "sequential", Op: "ADD", Workers: 1, Lat: d(20, 40)},
		{Plugin: "ref", Mode: "sequential", Op: "DEL", Workers: 1, Lat: d(20, 40)},
		{Plugin: "vmlane", Mode: "concurrent(2)", Op: "ADD", Workers: 2, Lat: d(10, 10)}, // no reference row
	}
	var b strings.Builder
	if err := writeTable(&b, ss); err != nil {
		t.Fatal(err)
	}
	b.WriteString("\n")
	if err := writeRatios(&b, ss, "ref"); err != nil {
		t.Fatal(err)
	}
	want := `  plugin           mode   op  n      p50      p99  ops/s
  vmlane     sequential  ADD  2  10.00ms  20.00ms   66.7
  vmlane     sequential  DEL  2  30.00ms  50.00ms   25.0
     ref     sequential  ADD  2  20.00ms  40.00ms   33.3
     ref     sequential  DEL  2  20.00ms  40.00ms   33.3
  vmlane  concurrent(2)  ADD  2  10.00ms  10.00ms  200.0

  ratio to ref        mode   op   p50   p99  goal ≤ 1.0
        vmlane  sequential  ADD  0.50  0.50         met
        vmlane  sequential  DEL  1.50  1.25      missed
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("tables (-want +got):\n%s", diff)
	}
}
