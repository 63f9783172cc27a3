package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vmlane/vmlane/leases"
)

// TestLeaseCountsPutUnknownStatesUnderOneLabel: states a newer vmlane
// wrote are counted, under one fixed label, so what a file holds cannot
// multiply vmlane_leases' series; a source this version does not know
// does not change how its state is counted.
func TestLeaseCountsPutUnknownStatesUnderOneLabel(t *testing.T) {
	got := leaseCounts([]leases.Lease{
		{State: leases.StateBound, Source: leases.SourceCNI},
		{State: leases.StateBound, Source: "kubevirt"},
		{State: leases.StateDeclined, Source: leases.SourceDHCP},
		{State: "quarantined", Source: leases.SourceCNI},
		{State: "draining", Source: leases.SourceDHCP},
		{State: leases.StateHeld, Source: leases.SourceCNI, VMName: "default/vm1"},
	})
	want := map[string]int{"reserved": 0, "bound": 2, "declined": 1, "held": 1, "unknown": 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("leaseCounts (-want +got):\n%s", diff)
	}
}
