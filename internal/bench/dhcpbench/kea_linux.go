package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vmlane/vmlane/internal/bench/benchns"
	"github.com/vmlane/vmlane/internal/netaddr"
)

// keaTarget is ISC Kea (Debian's kea-dhcp4-server or kea-dhcp6-server)
// configured as vmlaned is: the plan's reservations (by MAC for DHCP, by
// DUID-LL of the MAC for DHCPv6) and no pool, authoritative, the same
// options, the memfile lease backend with its lease file in the turn's
// folder (Kea appends a line per lease change), no lease file cleanup
// process, and warnings only in its log.
func keaTarget(cfg config, srvNS *benchns.NS, p plan) target {
	bin, file := cfg.kea4, "kea-dhcp4.json"
	if cfg.family == 6 {
		bin, file = cfg.kea6, "kea-dhcp6.json"
	}
	return target{
		name: "kea",
		prepare: func(dir string) error {
			conf := keaConfig4(dir, p)
			if cfg.family == 6 {
				conf = keaConfig6(dir, p)
			}
			b, err := json.MarshalIndent(conf, "", "  ")
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, file), b, 0o644)
		},
		start: func(dir string) (*server, error) {
			cmd := srvNS.Command(bin, "-c", filepath.Join(dir, file))
			// Its PID and logger lock files in the turn's folder, not
			// /run/kea: no run sees another's.
			cmd.Env = append(os.Environ(), "KEA_PIDFILE_DIR="+dir, "KEA_LOCKFILE_DIR="+dir)
			return startServer("kea", cmd)
		},
	}
}

type obj = map[string]any

func keaLoggers(name string) []obj {
	return []obj{{"name": name, "severity": "WARN", "output_options": []obj{{"output": "stdout"}}}}
}

func keaConfig4(dir string, p plan) obj {
	var res []obj
	for _, rs := range [][]reservation{p.warm, p.timed} {
		for _, r := range rs {
			res = append(res, obj{"hw-address": r.mac.String(), "ip-address": r.ip.String(), "hostname": r.name})
		}
	}
	gw := p.gateway.As4()
	return obj{"Dhcp4": obj{
		"interfaces-config": obj{"interfaces": []string{bridgeName}, "dhcp-socket-type": "raw"},
		"lease-database": obj{"type": "memfile", "persist": true, "lfc-interval": 0,
			"name": filepath.Join(dir, "kea-leases4.csv")},
		"authoritative":                true,
		"valid-lifetime":               int(leaseTime.Seconds()),
		"calculate-tee-times":          true,
		"host-reservation-identifiers": []string{"hw-address"},
		"option-data": []obj{
			{"name": "routers", "data": p.gateway.String()},
			{"name": "domain-name-servers", "data": dnsServer},
			{"name": "domain-name", "data": domain},
			{"name": "domain-search", "data": domain},
			{"name": "interface-mtu", "data": fmt.Sprint(mtu)},
			{"name": "broadcast-address", "data": netaddr.LastAddr(p.subnet).String()},
			// The classless default route (RFC 3442: width 0, then
			// the router), as raw bytes: Kea 2.2 has no text form.
			{"code": 121, "csv-format": false, "data": fmt.Sprintf("00%02X%02X%02X%02X", gw[0], gw[1], gw[2], gw[3])},
		},
		"subnet4": []obj{{"id": 1, "subnet": p.subnet.String(), "interface": bridgeName, "reservations": res}},
		"loggers": keaLoggers("kea-dhcp4"),
	}}
}

func keaConfig6(dir string, p plan) obj {
	var res []obj
	for _, rs := range [][]reservation{p.warm, p.timed} {
		for _, r := range rs {
			// DUID-LL (RFC 8415 §11.4): type 3, hardware type 1, the MAC.
			res = append(res, obj{"duid": "00:03:00:01:" + r.mac.String(), "ip-addresses": []string{r.ip6.String()}, "hostname": r.name})
		}
	}
	return obj{"Dhcp6": obj{
		"interfaces-config": obj{"interfaces": []string{bridgeName}},
		// Its server DUID file in the turn's folder, not /var/lib/kea.
		"data-directory": dir,
		"lease-database": obj{"type": "memfile", "persist": true, "lfc-interval": 0,
			"name": filepath.Join(dir, "kea-leases6.csv")},
		"valid-lifetime":               int(leaseTime.Seconds()),
		"preferred-lifetime":           int(leaseTime.Seconds()),
		"calculate-tee-times":          true,
		"host-reservation-identifiers": []string{"duid"},
		"option-data": []obj{
			{"name": "dns-servers", "data": dnsServer6},
			{"name": "domain-search", "data": domain},
		},
		"subnet6": []obj{{"id": 1, "subnet": p.subnet6.String(), "interface": bridgeName, "reservations": res}},
		"loggers": keaLoggers("kea-dhcp6"),
	}}
}

// keaVersion is "Kea VERSION" from `BIN -v`, or the binary's name.
func keaVersion(bin string) string {
	out, err := exec.Command(bin, "-v").Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return "Kea " + v
	}
	return filepath.Base(bin)
}
