package routes

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the route controller's Prometheus metrics.
type Metrics struct {
	owned     prometheus.Gauge
	installed prometheus.Counter
	deleted   prometheus.Counter
	skipped   prometheus.Counter
	foreign   prometheus.Gauge
	errors    prometheus.Counter
	reconcile prometheus.Histogram
	compute   prometheus.Histogram
	events    *prometheus.CounterVec
	tunneled  prometheus.Gauge
	tunnelErr prometheus.Counter
}

// NewMetrics registers the metrics with reg (nil: not registered, for
// tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		owned:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "vmlane_routes_owned", Help: "Routes with vmlane's protocol in the main table after the last reconcile."}),
		installed: prometheus.NewCounter(prometheus.CounterOpts{Name: "vmlane_routes_installed_total", Help: "Routes added, changed or restored."}),
		deleted:   prometheus.NewCounter(prometheus.CounterOpts{Name: "vmlane_routes_deleted_total", Help: "Owned routes deleted because no node wants them."}),
		skipped:   prometheus.NewCounter(prometheus.CounterOpts{Name: "vmlane_nexthops_skipped_total", Help: "Routes not installed because their next hop is not directly reachable (counted per reconcile)."}),
		foreign:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "vmlane_routes_foreign", Help: "Pod subnets routed by another owner, left alone."}),
		errors:    prometheus.NewCounter(prometheus.CounterOpts{Name: "vmlane_reconcile_errors_total", Help: "Reconciles that ended with an error."}),
		reconcile: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vmlane_reconcile_duration_seconds", Help: "Time to reconcile routes and iptables.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		compute:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vmlane_desired_compute_duration_seconds", Help: "Time to compute the desired state from the Node cache.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		events:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_informer_events_total", Help: "Node informer events by type."}, []string{"type"}),
		tunneled:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "vmlane_routes_tunneled", Help: "Routes through the VXLAN device after the last reconcile (--cross-subnet=vxlan)."}),
		tunnelErr: prometheus.NewCounter(prometheus.CounterOpts{Name: "vmlane_vxlan_errors_total", Help: "Reconciles whose VXLAN device or its FDB and neighbour entries could not be made as wanted."}),
	}
	if reg != nil {
		reg.MustRegister(m.owned, m.installed, m.deleted, m.skipped, m.foreign, m.errors, m.reconcile, m.compute, m.events, m.tunneled, m.tunnelErr)
	}
	return m
}

func (m *Metrics) informerEvent(kind string) {
	if m != nil {
		m.events.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) observeCompute(d time.Duration) {
	if m != nil {
		m.compute.Observe(d.Seconds())
	}
}

func (m *Metrics) observe(out Outcome, err error) {
	if m == nil {
		return
	}
	m.owned.Set(float64(out.Owned))
	if out.Duration > 0 {
		m.reconcile.Observe(out.Duration.Seconds())
	}
	m.installed.Add(float64(len(out.Installed)))
	m.deleted.Add(float64(len(out.Deleted)))
	m.skipped.Add(float64(len(out.Unreachable)))
	m.foreign.Set(float64(len(out.Foreign)))
	m.tunneled.Set(float64(len(out.Tunneled)))
	if out.TunnelErr != nil {
		m.tunnelErr.Inc()
	}
	if err != nil {
		m.errors.Inc()
	}
}
