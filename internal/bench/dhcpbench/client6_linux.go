package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// exchange6 runs one DHCPv6 exchange for r as a client after a router
// advertisement with the M flag does: SOLICIT, ADVERTISE, REQUEST, REPLY
// (no rapid commit, no retransmission), from r's MAC with a DUID-LL of it.
// It returns the time from SOLICIT sent to REPLY received. Each reply may
// take up to timeout; one that does not come ends the exchange with
// errTimeout. An address other than r's, or a status other than success,
// is an error: the servers must serve the reservations.
func (g *loadGen) exchange6(ctx context.Context, r reservation, timeout time.Duration) (time.Duration, string, error) {
	duid := &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: r.mac}
	iaid := [4]byte{r.mac[2], r.mac[3], r.mac[4], r.mac[5]}
	oro := dhcpv6.OptRequestedOption(dhcpv6.OptionDNSRecursiveNameServer, dhcpv6.OptionDomainSearchList)
	sol, err := dhcpv6.NewMessage()
	if err != nil {
		return 0, "", err
	}
	sol.MessageType = dhcpv6.MessageTypeSolicit
	id := xid{sol.TransactionID[0], sol.TransactionID[1], sol.TransactionID[2]}
	ch, err := g.register(&id)
	if err != nil {
		return 0, "", err
	}
	defer g.unregister(id)
	tid := dhcpv6.TransactionID{id[0], id[1], id[2]}
	sol.TransactionID = tid
	sol.AddOption(dhcpv6.OptClientID(duid))
	sol.AddOption(oro)
	sol.AddOption(dhcpv6.OptElapsedTime(0))
	sol.AddOption(&dhcpv6.OptIANA{IaId: iaid})

	start := time.Now()
	if err := g.send6(r.mac, sol); err != nil {
		return 0, "", err
	}
	adv, err := await6(ctx, ch, dhcpv6.MessageTypeAdvertise, timeout)
	if err != nil {
		return 0, "", err
	}
	if err := hasAddress(adv, r); err != nil {
		return 0, "", err
	}
	req := &dhcpv6.Message{MessageType: dhcpv6.MessageTypeRequest, TransactionID: tid}
	req.AddOption(dhcpv6.OptClientID(duid))
	req.AddOption(dhcpv6.OptServerID(adv.Options.ServerID()))
	req.AddOption(oro)
	req.AddOption(dhcpv6.OptElapsedTime(0))
	req.AddOption(adv.Options.OneIANA())
	if err := g.send6(r.mac, req); err != nil {
		return 0, "", err
	}
	rep, err := await6(ctx, ch, dhcpv6.MessageTypeReply, timeout)
	if err != nil {
		return 0, "", err
	}
	lat := time.Since(start)
	if err := hasAddress(rep, r); err != nil {
		return 0, "", err
	}
	return lat, fmt.Sprintf("REPLY: %d bytes, options %s", len(rep.ToBytes()), optionCodes6(rep)), nil
}

func (g *loadGen) send6(mac net.HardwareAddr, m *dhcpv6.Message) error {
	if err := g.write(clientFrame6(mac, m.ToBytes())); err != nil {
		return fmt.Errorf("sending %s for %s: %w", m.MessageType, mac, err)
	}
	return nil
}

// hasAddress checks that m gives r its reserved IPv6 address, with a
// lifetime, in its first IA_NA, and reports no failure status.
func hasAddress(m *dhcpv6.Message, r reservation) error {
	if st := m.Options.Status(); st != nil && st.StatusCode != iana.StatusSuccess {
		return fmt.Errorf("%s for %s: status %s (%s)", m.MessageType, r.mac, st.StatusCode, st.StatusMessage)
	}
	ia := m.Options.OneIANA()
	if ia == nil {
		return fmt.Errorf("%s for %s has no IA_NA", m.MessageType, r.mac)
	}
	for _, a := range ia.Options.Addresses() {
		if a.IPv6Addr.Equal(r.ip6.AsSlice()) && a.ValidLifetime > 0 {
			return nil
		}
	}
	return fmt.Errorf("%s for %s gives %v, not its reservation %s", m.MessageType, r.mac, ia.Options.Addresses(), r.ip6)
}

// await6 returns the next reply of type want on ch, skipping others (a
// duplicate ADVERTISE while waiting for the REPLY).
func await6(ctx context.Context, ch <-chan []byte, want dhcpv6.MessageType, timeout time.Duration) (*dhcpv6.Message, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, fmt.Errorf("waiting for %s: %w", want, errTimeout)
		case b := <-ch:
			m, err := dhcpv6.MessageFromBytes(b)
			if err != nil {
				return nil, fmt.Errorf("unparsable reply: %w", err)
			}
			if m.MessageType == want {
				return m, nil
			}
		}
	}
}

// optionCodes6 lists the option codes of m, sorted.
func optionCodes6(m *dhcpv6.Message) string {
	var codes []int
	for _, o := range m.Options.Options {
		codes = append(codes, int(o.Code()))
	}
	slices.Sort(codes)
	return strings.Trim(fmt.Sprint(codes), "[]")
}
