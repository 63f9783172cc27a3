package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"

	"github.com/vmlane/vmlane/leases"
)

// macPrefix starts every MAC vmlane derives: 0x02 is a locally administered
// unicast first octet (IEEE 802 U/L bit set, I/G bit clear), so it can never
// collide with a vendor's burned-in address; 0x76 ('v') tells vmlane's MACs
// apart from other local schemes (Docker's 02:42, libvirt's 52:54:00).
var macPrefix = [2]byte{0x02, 0x76}

// DeriveMAC returns the MAC vmlane gives a NIC whose address is ip: the
// prefix and the four bytes of the IPv4 address. The same address always
// gets the same MAC, so a restarted VM keeps its MAC and its DHCP lease,
// and two live NICs never share one because two leases never share an
// address.
func DeriveMAC(ip netip.Addr) string {
	b := ip.As16()
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", macPrefix[0], macPrefix[1], b[12], b[13], b[14], b[15])
}

// GatewayMAC is the MAC of every node's vmlane bridge: the pods' and VMs'
// gateway has the same MAC on every node, as OVN-Kubernetes' and Calico's
// gateways do. Bridges of different nodes share no segment, so nothing
// sees the two at once; what it buys is a live-migrated guest whose ARP
// entry for its gateway, and whose IPv6 default router (the bridge's
// link-local address, fe80::76:ff:fe00:1, made from this MAC), still
// answer on the node it migrated to, with no wait for the guest's neighbour
// entries to go stale. It is DeriveMAC of 0.0.0.1, an address no lease
// ever has, and a runtime may not ask for it (runtimeConfig.mac).
const GatewayMAC = "02:76:00:00:00:01"

// HostVethName is the host end's name for an attachment: "vml" and 11 hex
// digits of a hash of the container ID and interface name (14 bytes,
// under the kernel's limit of 15). Derived rather than random, so DEL and
// GC find the link even when the pod's netns is already gone, and a
// retried ADD replaces the link an interrupted one left.
func HostVethName(k leases.Key) string {
	sum := sha256.Sum256([]byte(k.ContainerID + "\x00" + k.IfName))
	return "vml" + hex.EncodeToString(sum[:])[:11]
}
