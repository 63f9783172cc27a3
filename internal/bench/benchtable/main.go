// Command benchtable reads `go test -bench` output on stdin and prints a
// table of the results: one row per benchmark (the median of its runs when
// run with -count), ns/op and every custom metric the benchmarks reported
// with b.ReportMetric. Then, for every benchmark that reports "writes/s",
// it prints how close the lease store comes to the bare
// temp+write+fsync+rename+fsync sequence: its rate divided by the floor it
// measured in the same run ("floor-writes/s", the trustworthy ratio on a
// disk whose fsync latency drifts), by the floor's sequence run by as many
// writer processes taking turns under one lock, when the benchmark
// measured that too ("floor-procs-writes/s"), and by BenchmarkWriteFloor's.
//
//	go test -run='^$' -bench=. -count=5 ./leases | go run ./internal/bench/benchtable
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// floorName is the benchmark whose writes/s the others are divided by.
const floorName = "BenchmarkWriteFloor"

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

// result is one benchmark's runs.
type result struct {
	name string
	runs []map[string]float64 // per run: unit → value
}

// values returns a metric's value in every run that reported it.
func (r *result) values(unit string) []float64 {
	var out []float64
	for _, run := range r.runs {
		if v, ok := run[unit]; ok {
			out = append(out, v)
		}
	}
	return out
}

// gomaxprocs is the "-8" that go test appends to a benchmark's name.
var gomaxprocs = regexp.MustCompile(`-\d+$`)

// parse reads benchmark result lines ("BenchmarkX-2  100  123 ns/op  4.5
// writes/s") and ignores every other line, so it can be fed go test's
// whole output.
func parse(r io.Reader) ([]*result, []string, error) {
	var (
		results []*result
		byName  = map[string]*result{}
		units   []string
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := gomaxprocs.ReplaceAllString(f[0], "")
		res := byName[name]
		if res == nil {
			res = &result{name: name}
			byName[name] = res
			results = append(results, res)
		}
		run := map[string]float64{}
		res.runs = append(res.runs, run)
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			unit := f[i+1]
			run[unit] = v
			if !slices.Contains(units, unit) {
				units = append(units, unit)
			}
		}
	}
	return results, units, sc.Err()
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func format(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func run(r io.Reader, w io.Writer) error {
	results, units, err := parse(r)
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return errors.New("no benchmark results on stdin")
	}
	// ns/op first; the rest in the order the benchmarks reported them.
	units = slices.DeleteFunc(units, func(u string) bool { return u == "ns/op" })
	units = append([]string{"ns/op"}, units...)

	// Numbers align right; names are padded to one width so that they
	// read left-aligned.
	width := len("benchmark")
	for _, res := range results {
		width = max(width, len(res.name))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\truns\t", width, "benchmark")
	for _, u := range units {
		fmt.Fprintf(tw, "%s\t", u)
	}
	fmt.Fprintln(tw)
	for _, res := range results {
		fmt.Fprintf(tw, "%-*s\t%d\t", width, res.name, len(res.runs))
		for _, u := range units {
			if vs := res.values(u); len(vs) > 0 {
				fmt.Fprintf(tw, "%s\t", format(median(vs)))
			} else {
				fmt.Fprint(tw, "-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	var floor float64
	for _, res := range results {
		if vs := res.values("writes/s"); res.name == floorName && len(vs) > 0 {
			floor = median(vs)
		}
	}
	ratio := func(v, floor float64) string {
		if floor == 0 {
			return "-"
		}
		return strconv.FormatFloat(v/floor, 'f', 2, 64)
	}
	header := false
	for _, res := range results {
		vs := res.values("writes/s")
		if res.name == floorName || len(vs) == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\nstore writes/s ÷ floor writes/s\n")
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "%-*s\twrites/s\tfloor, same run\tratio to it\tas many writers' floor\tratio to it\t÷ %s", width, "benchmark", floorName)
			if floor != 0 {
				fmt.Fprintf(tw, " (%s)", format(floor))
			}
			fmt.Fprintln(tw, "\t")
			header = true
		}
		v := median(vs)
		pairedFloor, pairedRatio := paired(res, "floor-writes/s")
		procsFloor, procsRatio := paired(res, "floor-procs-writes/s")
		fmt.Fprintf(tw, "%-*s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", width, res.name, format(v), pairedFloor, pairedRatio, procsFloor, procsRatio, ratio(v, floor))
	}
	if !header {
		return nil
	}
	return tw.Flush()
}

// paired returns the median of a benchmark's floor metric and of its
// writes/s over that floor, "-" for both when it reported none. The ratio
// is taken run by run, then the median of those: each pair was measured
// together.
func paired(res *result, floorUnit string) (floor, ratio string) {
	var ratios []float64
	for _, run := range res.runs {
		if w, f := run["writes/s"], run[floorUnit]; w > 0 && f > 0 {
			ratios = append(ratios, w/f)
		}
	}
	if len(ratios) == 0 {
		return "-", "-"
	}
	return format(median(res.values(floorUnit))), strconv.FormatFloat(median(ratios), 'f', 2, 64)
}
