package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/vmlane/vmlane/internal/bench/benchstat"
)

// result is one server at one level: every timed exchange it was sent.
type result struct {
	Server  string
	Clients int // exchanges in flight
	// Lat holds the DORA latency (DISCOVER sent to ACK received) of each
	// completed exchange.
	Lat []time.Duration
	// Timeouts counts exchanges whose OFFER or ACK did not come in time.
	Timeouts int
	// Wall is the summed wall time of the timed phases; CPU the server
	// process's on-CPU time (every thread, user and system) over them.
	Wall, CPU time.Duration
}

// n is the number of exchanges started.
func (r result) n() int { return len(r.Lat) + r.Timeouts }

// perSec is completed exchanges per second of wall time with Clients in
// flight: time spent waiting out a timeout counts against it.
func (r result) perSec() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return float64(len(r.Lat)) / r.Wall.Seconds()
}

// quantile is the nearest-rank q-quantile (0 < q ≤ 1) of every exchange
// started, a timed-out one counting as slower than any that completed. ok
// is false when the rank falls on a timeout: the quantile is then only
// known to exceed the timeout.
func (r result) quantile(q float64) (d time.Duration, ok bool) {
	return benchstat.Quantile(r.Lat, r.Timeouts, q)
}

// cpuPer is the server's CPU time per exchange started.
func (r result) cpuPer() time.Duration {
	if r.n() == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.n())
}

// seconds is a quantile as a number for ratios: +Inf when only a bound
// is known.
func (r result) seconds(q float64) float64 {
	d, ok := r.quantile(q)
	if !ok {
		return math.Inf(1)
	}
	return d.Seconds()
}

func fmtMS(d time.Duration, digits int) string {
	return fmt.Sprintf("%.*f ms", digits, float64(d)/float64(time.Millisecond))
}

func fmtQuantile(r result, q float64, timeout time.Duration) string {
	d, ok := r.quantile(q)
	if !ok {
		return "> " + timeout.String()
	}
	return fmtMS(d, 2)
}

func fmtRatio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", x)
}

// writeTable prints a markdown table: per level, a row per server, then a
// ratio row of sut to each of refs, with the goal: throughput ≥ the
// reference's and p99 ≤ the reference's. Levels come in the order of their
// first result.
func writeTable(w io.Writer, rs []result, sut string, refs []string, timeout time.Duration) error {
	rows := [][]string{{"server", "clients in flight", "exchanges", "exchanges/s", "p50", "p99", "timeouts", "server CPU/exchange", "goal"}}
	var levels []int
	for _, r := range rs {
		if !slices.Contains(levels, r.Clients) {
			levels = append(levels, r.Clients)
		}
	}
	for _, c := range levels {
		byServer := map[string]result{}
		for _, r := range rs {
			if r.Clients != c {
				continue
			}
			byServer[r.Server] = r
			rows = append(rows, []string{
				r.Server, fmt.Sprint(c), fmt.Sprint(r.n()), fmt.Sprintf("%.1f", r.perSec()),
				fmtQuantile(r, 0.50, timeout), fmtQuantile(r, 0.99, timeout),
				fmt.Sprint(r.Timeouts), fmtMS(r.cpuPer(), 3), "",
			})
		}
		s, okS := byServer[sut]
		for _, ref := range refs {
			f, okF := byServer[ref]
			if !okS || !okF {
				continue
			}
			tput := s.perSec() / f.perSec()
			p99 := s.seconds(0.99) / f.seconds(0.99)
			goal := "missed"
			if tput >= 1 && p99 <= 1 {
				goal = "met"
			}
			rows = append(rows, []string{
				"**" + sut + "/" + ref + "**", fmt.Sprint(c), "", fmtRatio(tput),
				fmtRatio(s.seconds(0.50) / f.seconds(0.50)), fmtRatio(p99), "",
				fmtRatio(float64(s.cpuPer()) / float64(f.cpuPer())), goal,
			})
		}
	}
	return writeMarkdown(w, rows, []bool{false, true, true, true, true, true, true, true, false})
}

// writeMarkdown prints rows (the first is the header) as a markdown table
// padded to line up in plain text too; right[i] right-aligns column i.
func writeMarkdown(w io.Writer, rows [][]string, right []bool) error {
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			width[i] = max(width[i], len([]rune(cell)), 3)
		}
	}
	line := func(cells []string) string {
		var b strings.Builder
		b.WriteString("|")
		for i, cell := range cells {
			pad := strings.Repeat(" ", width[i]-len([]rune(cell)))
			if right[i] {
				b.WriteString(" " + pad + cell + " |")
			} else {
				b.WriteString(" " + cell + pad + " |")
			}
		}
		return b.String() + "\n"
	}
	var out strings.Builder
	out.WriteString(line(rows[0]))
	sep := make([]string, len(width))
	for i, n := range width {
		sep[i] = strings.Repeat("-", n)
		if right[i] {
			sep[i] = strings.Repeat("-", n-1) + ":"
		}
	}
	out.WriteString(line(sep))
	for _, row := range rows[1:] {
		out.WriteString(line(row))
	}
	_, err := io.WriteString(w, out.String())
	return err
}
