package dhcp

import (
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Reasons a packet is dropped without a reply, passed to [Hooks.Drop] (and
// so the values of a metric label: keep them few and fixed).
const (
	DropMalformed   = "malformed"      // unparsable, or a field a request must have is missing
	DropBootReply   = "bootreply"      // op is BOOTREPLY: another server's answer, not for us
	DropHardware    = "hardware"       // htype is not Ethernet or hlen is not 6
	DropUnknownMAC  = "unknown_mac"    // no lease for the MAC and no dynamic range
	DropOtherServer = "other_server"   // REQUEST naming another server (the client chose it), or sent to another server's address and not renewing a lease here
	DropNoRecord    = "no_record"      // INIT-REBOOT from a MAC we know nothing of (RFC 2131 §4.3.2)
	DropNotLeased   = "not_leased"     // RELEASE/DECLINE of an address the MAC does not hold
	DropRateLimited = "rate_limited"   // the MAC sent more than its share (server only)
	DropStoreError  = "store_error"    // the lease store failed: no reply rather than an unpersisted one
	DropUnsupported = "unsupported"    // a message type a server does not handle
	DropExhausted   = "pool_exhausted" // the dynamic range has no free address
	DropDeclined    = "declined"       // the MAC's reserved address is quarantined after its DECLINE
	DropHeld        = "held"           // the MAC is a VM's whose pod went: its addresses wait for the VM's next pod

	DropRateLimitedOverflow = "rate_limited_overflow" // over the share of the clients past MaxClients (server only)
	DropRateLimitedGlobal   = "rate_limited_global"   // over the server's GlobalRate (server only)
	DropQueueFull           = "queue_full"            // every handler busy and the queue full (server only)
	DropUnknownLease        = "unknown_lease"         // the MAC's lease has a state or source this version does not know (a newer vmlane wrote it)
)

// Reasons for a DHCPNAK, passed to [Hooks.NAK].
const (
	NAKWrongAddress = "wrong_address" // requested IP or ciaddr is not the MAC's address
	NAKNoLease      = "no_lease"      // the selected/renewing server (us) holds no lease for the MAC
	NAKConflict     = "conflict"      // the store refused the bind (held for another MAC, quarantined)
	NAKWrongNetwork = "wrong_network" // the address is not in our subnet (client moved networks)
)

// Hooks receive events for metrics. Every field is optional; they are
// called synchronously from [Handler.Handle], so they must be cheap and safe
// for concurrent use.
type Hooks struct {
	// Request is called for every parsed request, by message type.
	Request func(t dhcpv4.MessageType)
	// Reply is called for every reply the handler returns, by type.
	Reply func(t dhcpv4.MessageType)
	// Drop is called when a packet gets no reply, with a Drop* reason.
	// RELEASE and DECLINE, which never get replies, are not drops.
	Drop func(reason string)
	// NAK is called for every DHCPNAK, with a NAK* reason.
	NAK func(reason string)
	// Latency is called with the time Handle took, store writes included.
	Latency func(t dhcpv4.MessageType, d time.Duration)
}

func (h Hooks) request(t dhcpv4.MessageType) {
	if h.Request != nil {
		h.Request(t)
	}
}

func (h Hooks) reply(t dhcpv4.MessageType) {
	if h.Reply != nil {
		h.Reply(t)
	}
}

func (h Hooks) drop(reason string) {
	if h.Drop != nil {
		h.Drop(reason)
	}
}

func (h Hooks) nak(reason string) {
	if h.NAK != nil {
		h.NAK(reason)
	}
}

func (h Hooks) latency(t dhcpv4.MessageType, d time.Duration) {
	if h.Latency != nil {
		h.Latency(t, d)
	}
}
