package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func ms(n ...int) []time.Duration {
	var out []time.Duration
	for _, m := range n {
		out = append(out, time.Duration(m)*time.Millisecond)
	}
	return out
}

func TestPerSecAndCPU(t *testing.T) {
	r := result{Lat: ms(1, 2, 3, 4), Timeouts: 1, Wall: 2 * time.Second, CPU: 10 * time.Millisecond}
	if got := r.perSec(); got != 2 {
		t.Errorf("perSec = %v, want 2 (4 completed in 2s; the timeout's wait counts, the timeout does not)", got)
	}
	if got := r.cpuPer(); got != 2*time.Millisecond {
		t.Errorf("cpuPer = %v, want 2ms (10ms over 5 exchanges started)", got)
	}
	if got := (result{}).perSec(); got != 0 {
		t.Errorf("perSec of nothing = %v, want 0", got)
	}
}

func TestWriteTable(t *testing.T) {
	rs := []result{
		{Server: "vmlaned", Clients: 1, Lat: ms(2, 4), Wall: 10 * time.Millisecond, CPU: 2 * time.Millisecond},
		{Server: "dnsmasq", Clients: 1, Lat: ms(1, 2), Wall: 4 * time.Millisecond, CPU: 1 * time.Millisecond},
		{Server: "vmlaned", Clients: 16, Lat: ms(10, 20, 30), Timeouts: 1, Wall: time.Second, CPU: 4 * time.Millisecond},
		{Server: "dnsmasq", Clients: 16, Lat: ms(20, 40, 80, 160), Wall: 2 * time.Second, CPU: 8 * time.Millisecond},
		{Server: "kea", Clients: 16, Lat: ms(10, 20, 30, 40), Wall: time.Second, CPU: 2 * time.Millisecond},
		{Server: "vmlaned", Clients: 64, Lat: ms(5), Wall: time.Second}, // no dnsmasq row: no ratio
	}
	var b strings.Builder
	if err := writeTable(&b, rs, "vmlaned", []string{"dnsmasq", "kea"}, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	want := `| server              | clients in flight | exchanges | exchanges/s |      p50 |       p99 | timeouts | server CPU/exchange | goal   |
| ------------------- | ----------------: | --------: | ----------: | -------: | --------: | -------: | ------------------: | ------ |
| vmlaned             |                 1 |         2 |       200.0 |  2.00 ms |   4.00 ms |        0 |            1.000 ms |        |
| dnsmasq             |                 1 |         2 |       500.0 |  1.00 ms |   2.00 ms |        0 |            0.500 ms |        |
| **vmlaned/dnsmasq** |                 1 |           |       0.40× |    2.00× |     2.00× |          |               2.00× | missed |
| vmlaned             |                16 |         4 |         3.0 | 20.00 ms |      > 2s |        1 |            1.000 ms |        |
| dnsmasq             |                16 |         4 |         2.0 | 40.00 ms | 160.00 ms |        0 |            2.000 ms |        |
| kea                 |                16 |         4 |         4.0 | 20.00 ms |  40.00 ms |        0 |            0.500 ms |        |
| **vmlaned/dnsmasq** |                16 |           |       1.50× |    0.50× |       n/a |          |               0.50× | missed |
| **vmlaned/kea**     |                16 |           |       0.75× |    1.00× |       n/a |          |               2.00× | missed |
| vmlaned             |                64 |         1 |         1.0 |  5.00 ms |   5.00 ms |        0 |            0.000 ms |        |
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}
