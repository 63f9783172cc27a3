package benchstat

import (
	"slices"
	"testing"
	"time"
)

// msSeq returns latencies of 1ms, 2ms, … n ms, shuffled so that Quantile
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
		name     string
		n        int // samples in lat
		slower   int
		q        float64
		want     time.Duration
		wantKnow bool
	}{
		{"p50 of one", 1, 0, 0.50, 1 * time.Millisecond, true},
		{"p99 of one", 1, 0, 0.99, 1 * time.Millisecond, true},
		{"p50 of two", 2, 0, 0.50, 1 * time.Millisecond, true},
		{"p50 of 100", 100, 0, 0.50, 50 * time.Millisecond, true},
		{"p99 of 100", 100, 0, 0.99, 99 * time.Millisecond, true},
		{"p99 of 200", 200, 0, 0.99, 198 * time.Millisecond, true},
		{"p99 of 50", 50, 0, 0.99, 50 * time.Millisecond, true},
		// 99 completed and 1 slower: the 99th of 100 is the slowest
		// completed one, the 100th the slower one.
		{"p99 below a slower one", 99, 1, 0.99, 99 * time.Millisecond, true},
		{"p99 on a slower one", 98, 2, 0.99, 0, false},
		{"p50 with most slower", 4, 6, 0.50, 0, false},
		{"empty", 0, 0, 0.50, 0, false},
	} {
		lat := msSeq(tc.n)
		before := slices.Clone(lat)
		got, ok := Quantile(lat, tc.slower, tc.q)
		if got != tc.want || ok != tc.wantKnow {
			t.Errorf("%s: Quantile(%d samples, %d slower, %v) = %v, %v; want %v, %v",
				tc.name, tc.n, tc.slower, tc.q, got, ok, tc.want, tc.wantKnow)
		}
		if !slices.Equal(lat, before) {
			t.Errorf("%s: Quantile reordered its samples", tc.name)
		}
	}
}
