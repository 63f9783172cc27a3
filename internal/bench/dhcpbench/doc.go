// Command dhcpbench measures whole DHCP exchanges (DISCOVER, OFFER,
// REQUEST, ACK) from many distinct MACs against vmlaned's DHCP server and
// against the servers it is held against, dnsmasq and ISC Kea, in the same
// run, and prints a markdown table of exchanges per second and p50/p99
// DORA latency at each number of clients in flight, with the ratios of
// vmlaned to each. The goal is vmlaned's throughput ≥ each one's and its
// p99 ≤ each one's. `make bench` runs it (`make bench-deps` installs
// Debian's kea-dhcp4-server and kea-dhcp6-server):
//
//	go run ./internal/bench/dhcpbench -vmlaned bin/vmlaned
//
// Flags:
//
//	-vmlaned PATH   the vmlaned binary (required)
//	-dnsmasq PATH   the dnsmasq binary (default /usr/sbin/dnsmasq)
//	-kea4 PATH      Kea's DHCP server, for -family 4 (default
//	                /usr/sbin/kea-dhcp4); empty leaves Kea out
//	-kea6 PATH      Kea's DHCPv6 server, for -family 6 (default
//	                /usr/sbin/kea-dhcp6); empty leaves Kea out
//	-levels L       clients in flight, comma-separated (default 1,16,64)
//	-n N            timed exchanges per server and level (default 800)
//	-rounds R       turns the servers take within a level (default 4)
//	-warmup W       uncounted exchanges per turn (default 32)
//	-timeout D      how long each reply may take (default 2s)
//	-contention C   clients like guests on a busy node: none (default),
//	                socket (each exchange opens a packet socket of its
//	                own, so every socket on the link gets a copy of every
//	                reply), cpu (each client burns -burn of CPU after each
//	                exchange in a process of its own, as a guest does on
//	                its own vCPU, so the server competes with its clients
//	                for the cores), both
//	-burn D         CPU burnt per exchange with cpu or both (default 2ms)
//	-family F       4 (default): DHCP, DISCOVER to ACK; 6: DHCPv6,
//	                SOLICIT, ADVERTISE, REQUEST, REPLY, from each MAC's
//	                EUI-64 link-local address with a DUID-LL of its MAC,
//	                timed from SOLICIT to REPLY (see "DHCPv6" below)
//
// # DHCPv6
//
// Both servers serve DHCPv6 on the same bridge in every run (vmlaned is
// dual-stack with --pod-cidr IPv4,IPv6; dnsmasq gets a static IPv6 range
// and each reservation's [ip6] in its hosts file, and finds a client's MAC
// in its DUID-LL). Both send their replies through the kernel to the
// client's link-local address; the clients are frames the load generator
// writes and answer no neighbour solicitation, so the server namespace
// gets a permanent neighbour entry for every client first, the same for
// both servers. The goal is the same as for DHCP.
//
// # Setup
//
// Two network namespaces: a server namespace holding the bridge vmlane0
// and a veth port on it, and a load namespace holding the veth's other
// end, where the clients are. vmlaned standalone (--pod-cidr) creates the
// bridge with the gateway address and MTU and leaves it when it stops;
// dnsmasq and Kea then serve the same bridge. One server runs at a time.
// For DHCPv6 the bench waits until the bridge's link-local address has
// passed duplicate address detection (Kea binds to it).
//
// Both servers serve the same reservations and nothing else: -warmup+1
// plus -n MAC→IP pairs in 10.252.0.0/22 (wider if they do not fit), given
// to vmlaned as a lease file of CNI reservations written the way the CNI
// plugin writes them (leases.Store.Update, Reserve with source cni, the
// attachment key, a pod name), and to dnsmasq as the same MAC,IP,hostname
// lines in a --dhcp-hostsfile, with a static --dhcp-range, --no-ping,
// --dhcp-authoritative, no DNS (--port=0) and --quiet-dhcp (vmlaned logs no
// per-packet lines at its default level either). Both send the same
// options: router and default classless route, DNS server, domain, search
// list, MTU, a one-hour lease with T1 and T2, and the pod's name as the
// hostname; the clients ask for all of them (dnsmasq sends only what is
// asked for), and the log shows both ACKs' option codes and sizes. Both
// lease files live in one temp folder, on the same file system. dnsmasq
// fsyncs its lease file before each ACK; vmlaned, as it runs on a node,
// ACKs a CNI reservation's bind at once and writes it within
// dhcp.LateBindDelay, batched (the reservation itself was on disk first).
//
// Kea gets a JSON config of the same: the reservations (by MAC; for
// DHCPv6 by the DUID-LL of the MAC the clients send) in one subnet with no
// pool, authoritative, the same options (the classless route as raw bytes,
// which Kea 2.2 has no text form for), T1 and T2 from calculate-tee-times,
// its memfile lease backend with the file in the turn's folder and no
// lease file cleanup (lfc-interval 0), its PID, lock and DUID files there
// too, and warnings only in its log. Kea's memfile appends one line per
// lease change with write(2) and never fsyncs (strace of a run: 834
// writes, no fsync or fdatasync), so of the three it does the least for
// a lease to survive a crash.
//
// # Clients
//
// One AF_PACKET socket in the load namespace writes whole Ethernet frames,
// each with its client's own source MAC, and reads every frame to UDP port
// 68 (a classic BPF filter), handing each reply to the exchange waiting on
// its xid. A client in INIT state has no address, so replies cannot be
// told apart by IP: vmlaned broadcasts them, dnsmasq unicasts them at layer
// 2 to chaddr. Each exchange builds its DISCOVER with dhcpv4.NewDiscovery
// (broadcast flag clear, as udhcpc and dhclient send it), waits for the
// OFFER with its xid, sends dhcpv4.NewRequestFromOffer, and waits for the
// ACK. Its latency is from the DISCOVER's send to the ACK's arrival. There
// is no retransmission: a reply that does not come within -timeout ends
// the exchange as a timeout, which is counted in the table and counts as
// slower than any completed exchange in the percentiles (a percentile that
// falls on one prints as "> timeout"). A NAK, or an address other than the
// MAC's reservation, stops the run: the comparison would be meaningless.
//
// Busy guests (-contention) stand for VMs, each with a kernel and vCPUs
// of its own, so what one client does must not hold up another's replies
// inside the load generator, where no real node would. A client burns its
// CPU in a process of its own (dhcpbench started again), which the kernel
// schedules against the server's threads as it would a vCPU thread; on a
// goroutine it held one of the load generator's few Ps while the replies
// of other clients waited behind it. With a socket per exchange the load
// generator runs with a P per client on top of the cores: closing a
// packet socket waits for an RCU grace period in the kernel, and clients
// doing so held every P, leaving replies unread in their sockets for tens
// of milliseconds (see clientProcs).
//
// # Method
//
// Every timed exchange is the first bind of a MAC of its own: each level
// starts both servers from fresh state (vmlaned: every reservation in
// state reserved; dnsmasq: an empty lease file), and no MAC is used twice
// within a level. That is the work of a VM booting for the first time on
// a node, which is the work that comes in bursts (a rollout, a node
// restart). Renewing the same few MACs instead would time a different,
// cheaper path, and soon run into vmlaned's per-MAC rate limit (20 packets
// at once, 10/s), which stays on. The per-MAC limit never bites here: an
// exchange is two packets per MAC.
//
// Within a level the servers take -rounds turns, the first one rotating,
// so that a burst of other load on the machine falls on both alike. A
// turn starts its server on that level's state, probes it with one
// exchange until it answers, runs -warmup exchanges (the same warm-up
// MACs every turn, so bound again after the first), then its share of the
// -n timed exchanges with the level's clients in flight: each client
// starts its next exchange as soon as its last one ends. Then the server
// is stopped with SIGTERM.
//
// exchanges/s is completed exchanges over the summed wall time of the
// timed phases, the drain at the end of each included; p50 and p99 are
// nearest-rank percentiles. The table also gives the server's CPU time
// (every thread, user and system, from /proc/PID/task/*/schedstat) per
// exchange over the timed phases: the cost behind the throughput, and much
// less moved by other load on the machine than latency is. Lines on
// stderr give per-level summaries, the clients' own CPU time, and any
// warning or error a server logged.
//
// # Namespaces and cleanup
//
// It must run as root, and touches nothing of the host's own: every link,
// address, ARP entry and process it makes lives in a namespace it made,
// named vmlbench-<pid>-srv and vmlbench-<pid>-load; its temp folder is
// dhcpbench-<pid>-*. Servers run in their own process group with
// Pdeathsig set, so they die with dhcpbench. On exit, on error and on
// SIGINT or SIGTERM (a second signal kills at once) it stops the server,
// deletes the namespaces (the bridge and veth with them) and the folder;
// each run first deletes those of earlier runs whose process is gone.
//
// It exits 1 on any failure, 2 on bad flags. It is Linux only.
package main
