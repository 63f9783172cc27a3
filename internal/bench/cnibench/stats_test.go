package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

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
		{Plugin: "vmlane", Mode: "sequential", Op: "ADD", Workers: 1, Lat: d(10, 20), Wall: 150 * time.Millisecond},
		{Plugin: "vmlane", Mode: "sequential", Op: "DEL", Workers: 1, Lat: d(30, 50), Wall: 150 * time.Millisecond},
		{Plugin: "ref", Mode: "sequential", Op: "ADD", Workers: 1, Lat: d(20, 40), Wall: 100 * time.Millisecond},
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

  ratio to ref        mode   op   p50   p99  wall  goal ≤ 1.0
        vmlane  sequential  ADD  0.50  0.50  1.50         met
        vmlane  sequential  DEL  1.50  1.25     -      missed
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("tables (-want +got):\n%s", diff)
	}
}

func TestFloorRatios(t *testing.T) {
	d := func(ms ...int) []time.Duration {
		var out []time.Duration
		for _, m := range ms {
			out = append(out, time.Duration(m)*time.Millisecond)
		}
		return out
	}
	ss := []series{
		{Plugin: "vmlane", Mode: "sequential", Op: "ADD", Lat: d(12, 20)},
		{Plugin: "vmlane", Mode: "sequential", Op: "DEL", Lat: d(90, 90)}, // DEL has no floor row
		{Plugin: "vmlane-vm", Mode: "sequential", Op: "ADD", Lat: d(20, 40)},
		{Plugin: floorName, Mode: "sequential", Op: "ADD", Lat: d(10, 20)},
		{Plugin: floorName + "-vm", Mode: "sequential", Op: "ADD", Lat: d(10, 20)},
		{Plugin: "vmlane", Mode: "concurrent(2)", Op: "ADD", Lat: d(10, 10)}, // no floor in this mode
	}
	var b strings.Builder
	if err := writeFloorRatios(&b, ss); err != nil {
		t.Fatal(err)
	}
	want := `  ADD, ratio to the floor        mode   p50   p99  goal p50 ≤ 1.5
           vmlane / floor  sequential  1.20  1.00             met
     vmlane-vm / floor-vm  sequential  2.00  2.00          missed
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("floor table (-want +got):\n%s", diff)
	}
}
