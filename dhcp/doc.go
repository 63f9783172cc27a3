// Package dhcp is vmlane's embedded DHCPv4 and DHCPv6 server: it answers
// VMs on the node bridge with the address the CNI plugin reserved for their
// MAC in the lease file and, when a dynamic range is configured, allocates
// IPv4 addresses to VMs attached to the bridge without CNI.
//
// # DHCPv6
//
// On a dual-stack node [Handler6] serves each CNI reservation's ip6 (see
// its Handle for every message) and [Server6] runs it on the bridge: a
// packet socket with a BPF filter for UDP to port 547 reads requests with
// their frame's source MAC, the client's identity (never its DUID, which
// a guest chooses), and a UDP socket bound to [::]:547 on the bridge,
// member of ff02::1:2, sends the replies to the client's link-local
// address. [StoreAllocator]'s Bind6 follows Bind's durability rules. The
// bridge's router advertisements, which send guests to DHCPv6, are
// internal/ra's. The rest of this comment is about DHCPv4.
//
// # Shape
//
// [Handler.Handle] is a pure function from request to reply in the
// coredhcp style (nil means drop); its only state is an [Allocator], which
// [StoreAllocator] implements on a *leases.Store. [Serve] (Linux only) owns
// the socket: UDP 0.0.0.0:67 bound to the bridge with SO_BINDTODEVICE,
// a per-MAC token bucket ([RateLimit], [RateBurst]), and replies addressed
// per RFC 2131 §4.1 (relay, NAK broadcast, unicast to ciaddr, else
// broadcast). A packet socket on the bridge reads the renewals a guest
// that moved here sends to its home node's server, and only an ACK
// answers them (elsewhere_linux.go). On macOS vmnet's bootpd serves VMs
// and Serve returns an error.
//
// # Messages
//
//   - DISCOVER: OFFER of the MAC's lease, or of a dynamic address held for
//     [OfferHold]; a MAC without a lease is ignored when there is no range.
//   - REQUEST: SELECTING (server identifier present: ignored if it names
//     another server, else ACK if the requested address is the MAC's, NAK
//     otherwise), INIT-REBOOT (ACK/NAK, silence for a MAC without a lease,
//     RFC 2131 §4.3.2), RENEWING/REBINDING (ACK if ciaddr is the MAC's,
//     else NAK; sent to another server's address, ACK or silence).
//   - RELEASE: a dynamic lease is freed; a CNI reservation goes back to
//     reserved (it is the pod's until CNI DEL).
//   - DECLINE: the address is quarantined ([DefaultQuarantine]); a dynamic
//     client gets another on its next DISCOVER; for a CNI reservation the
//     conflict is logged at error level.
//   - INFORM: ACK with the options, no address and no lease times.
//
// Leases are keyed by chaddr, never by client identifier (cloned VMs share
// one); the client identifier is echoed (RFC 6842). BOOTREPLYs, non-Ethernet
// or hlen≠6 packets, plain BOOTP and malformed packets are dropped and
// counted through [Hooks].
//
// # Options
//
// OFFER and ACK carry 1 subnet mask, 3 router, 6 DNS, 12 hostname (the pod
// name made a DNS label), 15 domain, 119 search list (RFC 3397), 26 MTU, 28
// broadcast, 51 lease time, 54 server identifier, 58/59 T1/T2 (½ and ⅞ of
// the lease) and 121 classless static routes (RFC 3442) with any configured
// routes first and the default route last, since clients that get 121
// ignore option 3. Addresses are always 4 bytes. NAKs carry 54 and 56.
//
// # Durability
//
// Every lease change is a leases.Store.Update, written and fsynced under
// the lease file lock, and all but one are on disk before Handle returns
// the reply that announces them: a dynamic offer before its OFFER leaves,
// a dynamic binding before its ACK. The exception, the bind of a CNI
// reservation once the allocator is deferred, is below. When the store fails Handle returns the error and no
// reply; the client retransmits. Binds that arrive together share one
// transaction (group commit, no timer: a lone bind commits at once), so a
// burst of guests costs one fsync per batch, not per guest. A CNI
// reservation is on disk before its VM exists, so once the server runs
// with [StoreAllocator.Defer] (vmlaned does) the bind of one, which only
// adds "bound" and an expiry, is acknowledged at once and written within
// [LateBindDelay] with the others of that window; RELEASE and DECLINE
// write pending binds first, and shutdown flushes them. Lookups, which every
// DISCOVER and REQUEST starts with, read the file without the lock
// (NewStoreAllocator), learn of the CNI plugin's writes by inotify on the
// lease folder ([StoreAllocator.Watch]), read the file again only when its
// inode, size or mtime changed, and decode it only when its bytes differ
// from what the store itself last read or wrote (leases.Store.Snapshot):
// in practice, only after another process wrote.
package dhcp
