package bgp

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the speaker's Prometheus metrics.
type Metrics struct {
	up        *prometheus.GaugeVec
	flaps     *prometheus.CounterVec
	refusals  *prometheus.CounterVec
	announced prometheus.Gauge
}

// NewMetrics registers the metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		up:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vmlane_bgp_session_up", Help: "1 while the BGP session with the peer is established."}, []string{"peer"}),
		flaps:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_bgp_session_flaps_total", Help: "Established BGP sessions that went down."}, []string{"peer"}),
		refusals:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vmlane_bgp_session_refusals_total", Help: "BGP sessions that failed before they were established, each new reason counted once in a row (a wrong ASN, a bad password)."}, []string{"peer"}),
		announced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vmlane_bgp_announced_prefixes", Help: "Prefixes announced to the peers: the node's pod subnets and the VMs that moved to it."}),
	}
	if reg != nil {
		reg.MustRegister(m.up, m.flaps, m.refusals, m.announced)
	}
	return m
}

func (m *Metrics) setUp(peer string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.up.WithLabelValues(peer).Set(v)
}

func (m *Metrics) flap(peer string) {
	if m != nil {
		m.flaps.WithLabelValues(peer).Inc()
	}
}

func (m *Metrics) refused(peer string) {
	if m != nil {
		m.refusals.WithLabelValues(peer).Inc()
	}
}

func (m *Metrics) setAnnounced(n int) {
	if m != nil {
		m.announced.Set(float64(n))
	}
}
