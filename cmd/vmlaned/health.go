package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/vmlane/vmlane/internal/version"
)

// health answers /healthz and /readyz.
type health struct {
	start  time.Time
	window time.Duration // three resync periods
	ready  atomic.Bool
	// lastOK returns when the last reconcile succeeded; nil in standalone
	// mode, where there is nothing to reconcile.
	lastOK func() time.Time
	// detail is what /healthz adds after its verdict: on a Mac, which
	// vmnet path the node takes and what it found.
	detail atomic.Pointer[string]
}

// setDetail sets the lines /healthz adds.
func (h *health) setDetail(s string) { h.detail.Store(&s) }

// details is the lines /healthz adds, newline-terminated, or "".
func (h *health) details() string {
	if d := h.detail.Load(); d != nil && *d != "" {
		return *d + "\n"
	}
	return ""
}

// healthy: a reconcile succeeded within the window, or the daemon is
// younger than the window (still syncing).
func (h *health) healthy(now time.Time) error {
	if h.lastOK == nil {
		return nil
	}
	last := h.lastOK()
	if last.IsZero() {
		if now.Sub(h.start) < h.window {
			return nil
		}
		return fmt.Errorf("no reconcile has succeeded in %s", now.Sub(h.start).Round(time.Second))
	}
	if age := now.Sub(last); age > h.window {
		return fmt.Errorf("last successful reconcile %s ago (limit %s)", age.Round(time.Second), h.window)
	}
	return nil
}

func (h *health) mux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := h.healthy(time.Now()); err != nil {
			http.Error(w, err.Error()+"\n"+h.details(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok\n"+h.details())
	})
	m.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !h.ready.Load() {
			http.Error(w, "node bootstrap not done", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return m
}

// buildInfo is vmlane_build_info: 1, labelled with the release this
// vmlaned was built from and its Go toolchain, so that a dashboard (or
// `count by (version) (vmlane_build_info)`) shows which nodes a rollout
// has reached.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vmlane_build_info",
		Help: "1, labelled with the vmlane release vmlaned was built from and its Go version.",
	}, []string{"version", "goversion"})
	g.WithLabelValues(version.Version, runtime.Version()).Set(1)
	return g
}

// serve runs an HTTP server on addr until ctx ends. It binds before
// returning, so a taken port is an error at start, not a log line later.
func serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "addr", addr, "err", err)
		}
	}()
	return nil
}

func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
