package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/vmlane/vmlane/leases
BenchmarkWriteFloor-2                    	    1000	   1000000 ns/op	   5.71 MB/s	   1000000 ns/write	      1000 writes/s
BenchmarkWriteFloor-2                    	    1000	   1250000 ns/op	   5.71 MB/s	   1250000 ns/write	       800.0 writes/s
BenchmarkWriteFloor-2                    	    1000	    500000 ns/op	   5.71 MB/s	    500000 ns/write	      2000 writes/s
BenchmarkReserveReleaseProcs/procs=1-2   	     200	   2500000 ns/op	   1250000 ns/write	       400.0 ops/s	       800.0 writes/s	       1600 floor-writes/s
BenchmarkReserveReleaseProcs/procs=16-2  	     200	   4000000 ns/op	   2000000 ns/write	       250.0 ops/s	       500.0 writes/s	       625.0 floor-procs-writes/s
BenchmarkReserveRelease-2   	     200	   2500000 ns/op	       400.0 writes/s	       800 floor-writes/s
BenchmarkReserveRelease-2   	     200	   2500000 ns/op	       900.0 writes/s	       1000 floor-writes/s
BenchmarkReserveRelease-2   	     200	   2500000 ns/op	       300.0 writes/s	       1000 floor-writes/s
BenchmarkReadByMAC4096-2                 	     200	   3495108 ns/op	       286.1 reads/s
--- FAIL: BenchmarkSomething
PASS
ok  	github.com/vmlane/vmlane/leases	4.746s
`

// row returns the fields of the output line whose first field is name.
func row(out, name string) []string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return f
		}
	}
	return nil
}

func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(strings.NewReader(sample), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	table, ratios, ok := strings.Cut(got, "store writes/s ÷ floor writes/s")
	if !ok {
		t.Fatalf("no ratio section:\n%s", got)
	}
	for _, tc := range []struct {
		section, name string
		want          []string
	}{
		// The median of three runs, the -2 suffix dropped, "-" for a
		// metric a benchmark does not report.
		{table, "BenchmarkWriteFloor", []string{"3", "1000000", "5.71", "1000000", "1000", "-", "-", "-", "-"}},
		{table, "BenchmarkReadByMAC4096", []string{"1", "3495108", "-", "-", "-", "-", "-", "-", "286"}},
		// Divided by the floor of the same run, by the floor of as
		// many writers, then by BenchmarkWriteFloor's; "-" where there
		// is no such floor.
		{ratios, "BenchmarkReserveReleaseProcs/procs=1", []string{"800", "1600", "0.50", "-", "-", "0.80"}},
		{ratios, "BenchmarkReserveReleaseProcs/procs=16", []string{"500", "-", "-", "625", "0.80", "0.50"}},
		// Run by run: 0.5, 0.9, 0.3; the median 0.50, not 400/1000.
		{ratios, "BenchmarkReserveRelease", []string{"400", "1000", "0.50", "-", "-", "0.40"}},
	} {
		f := row(tc.section, tc.name)
		if len(f) == 0 || strings.Join(f[1:], " ") != strings.Join(tc.want, " ") {
			t.Errorf("row %s = %q, want %q in:\n%s", tc.name, f, tc.want, got)
		}
	}
	if !strings.Contains(ratios, "÷ BenchmarkWriteFloor (1000)") {
		t.Errorf("the ratio section does not name the floor's median rate:\n%s", got)
	}
	if row(ratios, "BenchmarkReadByMAC4096") != nil || row(ratios, "BenchmarkWriteFloor") != nil {
		t.Errorf("only store benchmarks get a ratio:\n%s", got)
	}
}

func TestRunNeedsResults(t *testing.T) {
	if err := run(strings.NewReader("PASS\n"), new(strings.Builder)); err == nil {
		t.Error("run on input without benchmarks succeeded")
	}
}
