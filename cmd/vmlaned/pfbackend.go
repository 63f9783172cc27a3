package main

import (
	"errors"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmlane/vmlane/internal/sysctl"
	"github.com/vmlane/vmlane/pf"
	"github.com/vmlane/vmlane/routes"
)

// pfBackend is the routes.NATBackend of a macOS node: the no-nat rules in
// vmlane's pf anchor, and IP forwarding on. It is wired here rather than
// in routes, so that routes does not depend on pf. Only macOS runs it, but
// it builds everywhere so that its tests run on Linux too.
type pfBackend struct {
	pf     pfAnchor
	sysctl sysctl.Store
	// hook, when set, is told on each full pass whether the main
	// ruleset still hooks vmlane's anchor in (pf.CheckHook).
	hook *hookStatus
}

// pfAnchor is what pfBackend asks of *pf.PF.
type pfAnchor interface {
	Ensure(rules []string, full bool) (changed bool, err error)
	CheckHook() error
}

// hookStatus is the last finding of pf.CheckHook, for the node's
// NetworkUnavailable condition, an Event and the metric
// vmlane_pf_hook_missing. A missing hook does not fail the reconcile:
// vmlane's own rules are fine, and nothing vmlane can do restores a main
// ruleset another tool loaded.
type hookStatus struct {
	mu      sync.Mutex
	problem string
	gauge   prometheus.Gauge
}

func newHookStatus(reg prometheus.Registerer) *hookStatus {
	h := &hookStatus{gauge: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "vmlane_pf_hook_missing",
		Help: "1 while pf's main ruleset does not reach vmlane's anchor (no nat-anchor \"com.apple/*\", or after vmnet's internet-sharing NAT).",
	})}
	reg.MustRegister(h.gauge)
	return h
}

func (h *hookStatus) set(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.problem = ""
	if err != nil {
		h.problem = err.Error()
	}
	v := 0.0
	if err != nil {
		v = 1
	}
	h.gauge.Set(v)
}

// get is the problem found last, "" when the hook is in place (or not
// checked yet).
func (h *hookStatus) get() string {
	if h == nil {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.problem
}

// Ensure loads the anchor's rules (pf.Ensure) and, on full passes, turns
// forwarding on for the families that have a pod subnet: without it the
// Mac drops what other nodes route to its VMs. vmnet's shared mode usually
// has it on already, and EnsureForwarding reads before it writes.
func (b pfBackend) Ensure(nat []routes.NATOptions, full bool) error {
	var rules, names []string
	v4, v6 := false, false
	for _, o := range nat {
		if !o.PodCIDR.IsValid() {
			continue
		}
		noNAT := o.Cluster
		if o.RouteServices {
			// Routed to a Service gateway, which masquerades them: the
			// VM's own address must reach it.
			noNAT = append(slices.Clone(o.Cluster), o.Services...)
		}
		rules = append(rules, pf.NoNATRules(o.PodCIDR, noNAT)...)
		v4 = v4 || o.PodCIDR.Addr().Is4()
		v6 = v6 || o.PodCIDR.Addr().Is6()
	}
	_, err := b.pf.Ensure(rules, full)
	if full && b.hook != nil {
		b.hook.set(b.pf.CheckHook())
	}
	if full {
		if v4 {
			names = append(names, sysctl.MacIPv4Forwarding)
		}
		if v6 {
			names = append(names, sysctl.MacIPv6Forwarding)
		}
		_, ferr := sysctl.EnsureForwarding(b.sysctl, names...)
		err = errors.Join(err, ferr)
	}
	return err
}
