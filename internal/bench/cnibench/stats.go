package main

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/vmlane/vmlane/internal/bench/benchstat"
)

// series is the latencies of one operation of one target in one mode.
type series struct {
	Plugin  string
	Mode    string
	Op      string
	Workers int // 1 for sequential
	Lat     []time.Duration
	// Wall is the wall time of the mode's ADD+DEL iterations, the same
	// in its ADD and DEL series; zero when not measured.
	Wall time.Duration
}

// quantile is the nearest-rank q-quantile (0 < q ≤ 1): the smallest
// latency that at least q of the samples do not exceed; 0 of none.
func (s series) quantile(q float64) time.Duration {
	d, _ := benchstat.Quantile(s.Lat, 0, q)
	return d
}

// opsPerSec is n / (Σ latency / workers): 1 / mean latency when
// sequential, the total throughput of the operation when every one of the
// workers is busy with it.
func (s series) opsPerSec() float64 {
	var sum time.Duration
	for _, d := range s.Lat {
		sum += d
	}
	if sum == 0 {
		return 0
	}
	return float64(len(s.Lat)) * float64(max(s.Workers, 1)) / sum.Seconds()
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// writeTable prints one row per series.
func writeTable(w io.Writer, ss []series) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "plugin\tmode\top\tn\tp50\tp99\tops/s\t")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%.1f\t\n",
			s.Plugin, s.Mode, s.Op, len(s.Lat), ms(s.quantile(0.50)), ms(s.quantile(0.99)), s.opsPerSec())
	}
	return tw.Flush()
}

// writeRatios prints, for every series of a plugin other than ref, its p50
// and p99 divided by those of ref's series of the same mode and operation.
// The goal is a ratio of at most 1.0: vmlane no slower than the reference.
// The wall column is the ratio of the mode's ADD+DEL wall times, which at
// concurrency shows what the plugins' waits for each other cost.
func writeRatios(w io.Writer, ss []series, ref string) error {
	refs := map[[2]string]series{}
	for _, s := range ss {
		if s.Plugin == ref {
			refs[[2]string{s.Mode, s.Op}] = s
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "ratio to %s\tmode\top\tp50\tp99\twall\tgoal ≤ 1.0\t\n", ref)
	for _, s := range ss {
		r, ok := refs[[2]string{s.Mode, s.Op}]
		if s.Plugin == ref || !ok {
			continue
		}
		p50 := ratio(s.quantile(0.50), r.quantile(0.50))
		p99 := ratio(s.quantile(0.99), r.quantile(0.99))
		verdict := "met"
		if p50 > 1 || p99 > 1 {
			verdict = "missed"
		}
		wall := "-"
		if s.Wall > 0 && r.Wall > 0 {
			wall = fmt.Sprintf("%.2f", ratio(s.Wall, r.Wall))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%s\t%s\t\n", s.Plugin, s.Mode, s.Op, p50, p99, wall, verdict)
	}
	return tw.Flush()
}

// floorName names the floor targets: netlinkfloor, the same kernel work
// as vmlane's ADD and nothing else (plain, and VM with floorName-vm).
const floorName = "floor"

// writeFloorRatios prints vmlane's ADD against the floor's, each mode:
// vmlane over floor, vmlane-vm over floor-vm. The goal is 1.5 at p50.
func writeFloorRatios(w io.Writer, ss []series) error {
	find := func(plugin, mode string) (series, bool) {
		for _, s := range ss {
			if s.Plugin == plugin && s.Mode == mode && s.Op == "ADD" {
				return s, true
			}
		}
		return series{}, false
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "ADD, ratio to the floor\tmode\tp50\tp99\tgoal p50 ≤ 1.5\t\n")
	for _, s := range ss {
		floor := map[string]string{"vmlane": floorName, "vmlane-vm": floorName + "-vm"}[s.Plugin]
		if floor == "" || s.Op != "ADD" {
			continue
		}
		f, ok := find(floor, s.Mode)
		if !ok {
			continue
		}
		p50 := ratio(s.quantile(0.50), f.quantile(0.50))
		verdict := "met"
		if p50 > 1.5 {
			verdict = "missed"
		}
		fmt.Fprintf(tw, "%s / %s\t%s\t%.2f\t%.2f\t%s\t\n", s.Plugin, floor, s.Mode, p50, ratio(s.quantile(0.99), f.quantile(0.99)), verdict)
	}
	return tw.Flush()
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return float64(a) / float64(b)
}
