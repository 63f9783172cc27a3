// Package plugin is the vmlane CNI plugin: it attaches a pod to the node's
// VM bridge and gives it an address from the node's pod subnet, held in the
// lease store.
//
// A plain pod gets what the reference bridge plugin gives: a veth whose host
// end is on the bridge and whose pod end carries the address and a default
// route. A VM pod ("vm": true) gets the veth with no address, and beside it
// a TAP device for the VM runtime to open; tc ingress + mirred egress
// redirect joins the two in both directions, so the guest's frames cross the
// pod's netns unchanged and the guest, not the netns, owns the address. The
// address is reserved for the guest's MAC (the runtime's "mac" capability,
// or one derived from the address, see DeriveMAC), and vmlaned's DHCP server
// hands it to the guest.
//
// With "subnet6" (a dual-stack node) every attachment also gets an address
// of the node's IPv6 pod subnet: a plain pod in its netns (without DAD)
// with an IPv6 default route, a VM's guest by DHCPv6 from vmlaned. The
// result lists both, IPv4 first, on CNI_IFNAME.
//
// Every kernel effect goes through the dataplane interface; the Linux
// implementation uses netlink. The verbs follow CNI spec 1.1: ADD undoes
// its own work when it fails, DEL succeeds when there is nothing left, GC
// releases leases of attachments the runtime no longer lists, STATUS says
// whether an ADD could succeed now.
package plugin
