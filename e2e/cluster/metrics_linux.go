package cluster

import (
	"strconv"
	"strings"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// Metrics reads vmlaned's /metrics (its --metrics-addr default,
// 127.0.0.1:9464) from inside ns: each series' value by its text as the
// exposition writes it, `name{label="value"}` (or `name`).
func Metrics(ns *netnstest.NS) (map[string]float64, error) {
	out, err := ns.Run("timeout", "5", "busybox", "wget", "-q", "-O", "-", "http://127.0.0.1:9464/metrics")
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, nil
}
