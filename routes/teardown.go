package routes

import (
	"errors"
	"fmt"
)

// Teardown removes what vmlane installed: every route with protocol proto
// and vmlane's chains (with their jumps) in each iptables given (nil ones
// are skipped). Nothing else is touched. It returns the routes it removed.
func Teardown(t routeTable, ipts []iptablesInterface, proto int) ([]KernelRoute, error) {
	var errs []error
	var removed []KernelRoute
	rs, err := t.List()
	if err != nil {
		errs = append(errs, fmt.Errorf("listing routes: %w", err))
	}
	for _, r := range rs {
		if r.Proto != proto {
			continue
		}
		if err := t.Delete(r); err != nil {
			errs = append(errs, fmt.Errorf("deleting route %s: %w", r, err))
			continue
		}
		removed = append(removed, r)
	}
	nat, fwd := skeletons()
	skeleton := []Chain{nat, fwd}
	for _, ipt := range ipts {
		if ipt != nil {
			errs = append(errs, RemoveChains(ipt, skeleton))
		}
	}
	return removed, errors.Join(errs...)
}
