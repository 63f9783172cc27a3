package leases

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// BootpdPath is where macOS's DHCP server (bootpd, which serves vmnet's
// shared network) keeps its leases.
const BootpdPath = "/var/db/dhcpd_leases"

// maxBootpdLine bounds one line, so a corrupt file cannot make the parser
// buffer without limit.
const maxBootpdLine = 4096

// ParseBootpd parses macOS bootpd's lease file: blocks of key=value lines
// between "{" and "}", newest first:
//
//	{
//		name=vm-a
//		ip_address=192.168.64.2
//		hw_address=1,62:25:1b:5:97:bf
//		identifier=1,62:25:1b:5:97:bf
//		lease=0x6782bf9a
//	}
//
// hw_address is "type,address" with leading zeros stripped from each octet;
// type 1 is Ethernet. Since macOS 15, bootpd writes the client identifier
// there instead when the client sent one of RFC 4361's (type ff: a 4-byte
// IAID, then a DUID; systemd-networkd's default, and cloud images'): the
// MAC is then taken out of a DUID-LL or DUID-LLT of an Ethernet link, and
// any other DUID (systemd's DUID-EN, a DUID-UUID) leaves the entry without
// one: a VM runtime finds those guests by other means (docs/macos.md says which
// guests must send their MAC as the identifier). lease is the absolute
// expiry in Unix seconds, in hex. Every entry comes back as a bound DHCP
// lease, in file order; one without a MAC (ByIP finds it, ByMAC never)
// is logged at debug level (log/slog's default logger), and FindIP falls
// back to the ARP table for it.
func ParseBootpd(r io.Reader) ([]Lease, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), maxBootpdLine)
	var (
		out     []Lease
		cur     *Lease
		start   int
		lineNum int
		hw      string // the entry's hw_address, for the debug line
	)
	for sc.Scan() {
		lineNum++
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			continue
		case line == "{":
			if cur != nil {
				return nil, fmt.Errorf("line %d: \"{\" inside the entry opened at line %d", lineNum, start)
			}
			cur, start, hw = &Lease{State: StateBound, Source: SourceDHCP}, lineNum, ""
			continue
		case line == "}":
			if cur == nil {
				return nil, fmt.Errorf("line %d: \"}\" without \"{\"", lineNum)
			}
			if !cur.IP.IsValid() {
				return nil, fmt.Errorf("entry at line %d has no ip_address", start)
			}
			if cur.MAC == "" {
				slog.Debug("bootpd lease without a MAC: its client identifier is neither a MAC nor the DUID-LL or DUID-LLT of an Ethernet link, so no lookup by MAC finds it",
					"ip", cur.IP, "name", cur.Hostname, "hw_address", hw, "line", start)
			}
			out = append(out, *cur)
			cur = nil
			continue
		case cur == nil:
			return nil, fmt.Errorf("line %d: %q outside an entry", lineNum, line)
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not key=value", lineNum, line)
		}
		if key == "hw_address" {
			hw = val
		}
		if err := setBootpdField(cur, key, val); err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNum, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", lineNum+1, maxBootpdLine)
		}
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("entry at line %d is not closed", start)
	}
	return out, nil
}

func setBootpdField(l *Lease, key, val string) error {
	switch key {
	case "name":
		l.Hostname = val
	case "ip_address":
		ip, err := netip.ParseAddr(val)
		if err != nil || !ip.Is4() {
			return fmt.Errorf("ip_address %q is not an IPv4 address", val)
		}
		l.IP = ip
	case "hw_address":
		mac, err := parseBootpdHW(val)
		if err != nil {
			return fmt.Errorf("hw_address %q: %w", val, err)
		}
		if mac != "" {
			l.MAC = mac
			// Since macOS 15 bootpd writes a client identifier of
			// RFC 4361's (type ff) here too.
			l.MACFromClientID = strings.HasPrefix(val, "ff,")
		}
	case "identifier":
		// The same forms, when hw_address gave no MAC (or is absent): a
		// malformed identifier is the client's business, not an error.
		if l.MAC == "" {
			if mac, err := parseBootpdHW(val); err == nil && mac != "" {
				l.MAC = mac
				// The identifier is the client's to choose, whatever
				// its form.
				l.MACFromClientID = true
			}
		}
	case "lease":
		h, ok := strings.CutPrefix(val, "0x")
		if !ok {
			return fmt.Errorf("lease %q: want 0x and hex Unix seconds", val)
		}
		secs, err := strconv.ParseUint(h, 16, 63)
		if err != nil || secs > 1<<40 {
			return fmt.Errorf("lease %q: want 0x and hex Unix seconds", val)
		}
		l.Expires = time.Unix(int64(secs), 0).UTC()
	}
	// Keys bootpd may add later carry nothing vmlane uses.
	return nil
}

// parseBootpdHW turns "1,62:25:1b:5:97:bf" into "62:25:1b:05:97:bf", and
// an RFC 4361 client identifier ("ff,IAID:DUID") whose DUID carries an
// Ethernet MAC into that MAC. Other types, and other DUIDs, yield "".
func parseBootpdHW(val string) (string, error) {
	typ, addr, ok := strings.Cut(val, ",")
	if !ok {
		return "", errors.New("want type,address")
	}
	if typ == "ff" {
		return MACFromClientID(addr), nil
	}
	if typ != "1" {
		return "", nil
	}
	if n := strings.Count(addr, ":") + 1; n != 6 {
		return "", fmt.Errorf("want 6 octets, got %d", n)
	}
	mac, err := NormalizeMAC(addr)
	if err != nil {
		return "", fmt.Errorf("octets are not hex: %w", err)
	}
	return mac, nil
}

// DUID types (RFC 8415 section 11) that hold a link-layer address, and
// the hardware type of Ethernet (IANA ARP hardware types).
const (
	duidLLT      = 1
	duidLL       = 3
	hwEthernet   = 1
	iaidLen      = 4
	duidLLLen    = 2 + 2 + 6     // type, hardware type, MAC
	duidLLTLen   = 2 + 2 + 4 + 6 // type, hardware type, time, MAC
	maxClientIDs = 2 + 128 + 4   // the longest identifier worth reading: a DUID is at most 128 bytes
)

// MACFromClientID is the MAC in an RFC 4361 client identifier as bootpd
// writes it after "ff," (octets in hex without leading zeros, a 4-byte
// IAID, then the DUID): the link-layer address of a DUID-LL or DUID-LLT
// of an Ethernet link, or "" for anything else, a malformed one included,
// so that a wrong match is never made.
func MACFromClientID(addr string) string {
	fields := strings.Split(addr, ":")
	if len(fields) > maxClientIDs {
		return ""
	}
	b := make([]byte, 0, len(fields))
	for _, f := range fields {
		if len(f) == 0 || len(f) > 2 {
			return ""
		}
		v, err := strconv.ParseUint(f, 16, 8)
		if err != nil {
			return ""
		}
		b = append(b, byte(v))
	}
	if len(b) < iaidLen+2 {
		return ""
	}
	duid := b[iaidLen:]
	var mac []byte
	switch typ := int(duid[0])<<8 | int(duid[1]); {
	case typ == duidLL && len(duid) == duidLLLen && duid[2] == 0 && duid[3] == hwEthernet:
		mac = duid[4:]
	case typ == duidLLT && len(duid) == duidLLTLen && duid[2] == 0 && duid[3] == hwEthernet:
		mac = duid[8:]
	default:
		return ""
	}
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5])
}
