// Package benchstat holds the statistics the benchmark commands
// (cnibench, dhcpbench) share.
package benchstat

import (
	"math"
	"slices"
	"time"
)

// Quantile is the nearest-rank q-quantile (0 < q ≤ 1) of the samples lat
// plus slower ones, samples known only to be slower than any in lat (timed
// out): the smallest sample that at least q of all len(lat)+slower do not
// exceed. ok is false when there is no sample, or when the rank falls on
// one of the slower ones: the quantile is then only known to exceed every
// latency in lat. lat is left as it is.
func Quantile(lat []time.Duration, slower int, q float64) (d time.Duration, ok bool) {
	n := len(lat) + slower
	if n == 0 {
		return 0, false
	}
	rank := min(max(int(math.Ceil(q*float64(n))), 1), n)
	if rank > len(lat) {
		return 0, false
	}
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	return sorted[rank-1], true
}
