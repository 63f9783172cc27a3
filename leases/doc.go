// Package leases is vmlane's lease store: the record of which address each VM
// or pod holds on a node, kept in one JSON file (by default
// /var/lib/vmlane/leases.json).
//
// It has two audiences. Writers (the CNI plugin, the DHCP server, vmlanectl)
// use a [Store], which serializes every change on an exclusive flock of
// "<file>.lock" and replaces the file atomically: write a temp file in the
// same folder, fsync it, rename it over the old one, and (after letting the
// lock go, so the next writer's write overlaps it) fsync the folder before
// the change is reported done. VM
// runtimes use [Read], [Wait] and the [Snapshot] lookups; readers never lock,
// because a rename is atomic and a reader therefore sees either the old file
// or the new one, never a mix.
//
// The same reader API also reads macOS bootpd's /var/db/dhcpd_leases
// ([ParseBootpd]), so a VM runtime has one way to map a VM's MAC to its IP on
// both systems.
//
// The package depends on the standard library only (directly, and through
// small internal packages of vmlane's that import nothing else; make lint
// checks it all the way down, for Linux and macOS), so a VM runtime can depend
// on it without pulling in netlink or client-go.
//
// # File format (versions 1 and 2)
//
//	{
//	  "version": 1,
//	  "node": "node-a",
//	  "subnet": "10.244.3.0/24",
//	  "gateway": "10.244.3.1",
//	  "lastReserved": "10.244.3.7",
//	  "leases": [
//	    {
//	      "mac": "02:00:0a:f4:03:07",
//	      "ip": "10.244.3.7",
//	      "state": "bound",
//	      "source": "cni",
//	      "containerID": "4f6c…",
//	      "ifname": "eth0",
//	      "netns": "/var/run/netns/cni-1234",
//	      "bridgePort": "vml4f6c2b9e0d1",
//	      "pod": {"namespace": "default", "name": "vm-a", "uid": "5b1e…"},
//	      "hostname": "vm-a",
//	      "created": "2026-11-22T17:00:00Z",
//	      "expires": "2026-11-23T17:00:00Z"
//	    }
//	  ]
//	}
//
// Leases are sorted by IP. "expires" is absent while a CNI reservation is not
// yet bound by DHCP: such a reservation lasts until CNI DEL or GC releases
// it. "lastReserved" is the allocator's round-robin cursor (as host-local
// keeps one): it is an addition to the documented contract that readers may
// ignore. "bridgePort" names the host veth anti-spoofing checks the
// attachment on (absent when the network has it off), and "vm" marks a VM
// pod's attachment. schema.json in this folder is the JSON Schema of the
// format.
//
// # VM identity
//
// A lease of a pod annotated vmlane.io/vm has "vmName" ("NAMESPACE/NAME"):
// its ip, ip6 and mac are the VM's. When its attachment goes (Release, GC)
// the lease turns "held" ([StateHeld]): no attachment, no DHCP state, an
// "expires" at the store's VM hold time ([WithVMHold]); nothing answers for
// it ([Lease.Live] is false) and nothing else gets its addresses or MAC,
// and the VM's next pod takes it over ([ReserveRequest].VMName). Expire
// frees it when its time is over. An older reader sees "held" as a state
// it does not know, which holds the addresses all the same.
//
// A VM whose pod came from another node brings its addresses along (its
// VMClaim): its lease's ip and ip6 lie outside the file's subnet and
// subnet6, in "home" and "home6", the other node's pod subnets. A version 1
// reader would take such a lease for damage, so a file that holds one is
// version 2, and is written as version 1 again once none is left: a
// version 2 file is a version 1 file with those two members.
//
// # Dual stack
//
// On a node with an IPv6 pod subnet the file also has "subnet6",
// "gateway6" and "lastReserved6", and each CNI reservation an "ip6" from
// subnet6, allocated as IPv4 addresses are (round robin, the gateway and
// the subnet-router anycast address never), and for a VM the DHCPv6
// server's "state6" ("bound" or "declined", absent while only reserved)
// and "expires6", independent of the IPv4 "state" and "expires". Dynamic
// DHCPv4 leases get no ip6. The members are additions to version 1, not a
// new version: a reader from before them keeps them as members it does not
// know (below), and an IPv4-only file has none of them. [Snapshot.ByIP]
// finds a lease by either address. A [Store] opened without [WithSubnet6]
// hands out no ip6 and leaves the file's IPv6 members as they are.
//
// # Forward compatibility
//
// During a rolling upgrade binaries of two versions share a node's file (an
// older CNI plugin beside a newer vmlaned), so a version 1 file may hold
// what a newer writer added, and an older binary must neither refuse it nor
// lose it when it rewrites the file:
//
//   - Members this version does not know, at the top level, in a lease or
//     in its "pod", are kept verbatim ([UnknownMembers]) and written back
//     after the known members of their object, in the order they were
//     read. A lease this version creates has none.
//   - A lease whose "state" or "source" this version does not know
//     ([Lease.Known] is false) does not make the file unreadable (only a
//     missing one does). It is kept as it is and skipped: its ip and mac
//     stay held against every allocation (Reserve never hands them to
//     another lease), but no lookup that serves an address returns it
//     ([Snapshot.ByMAC], [Tx.ByMAC], [Tx.Get], [Snapshot.Compat]), and no
//     change touches it: Release, ReleaseMAC, GC and Expire leave it, Bind,
//     Decline and a Reserve for its attachment refuse with [ErrConflict].
//     Listings ([Snapshot.Leases], [Tx.Leases]) and the lookups that say
//     who holds an address ([Snapshot.ByIP], [Tx.ByIP], [Snapshot.ByPod])
//     include it; their callers check [Lease.Known]. What the value means
//     is for a version that knows it to act on.
package leases
