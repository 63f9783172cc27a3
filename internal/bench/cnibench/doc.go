// Command cnibench measures the latency of CNI ADD and DEL, called through
// libcni the way a container runtime calls them, for vmlane and for the
// reference plugins it is held against (containernetworking's bridge with
// host-local IPAM), and prints a table of both and the ratios of vmlane to
// the reference. `make bench` runs it:
//
//	go build -o .cache/bench/ ./internal/bench/netlinkfloor
//	go run ./internal/bench/cnibench -vmlane bin/vmlane -vmlaned bin/vmlaned -ref .cache/cni-plugins/v1.9.1 -floor .cache/bench/netlinkfloor
//
// Flags:
//
//	-vmlane PATH     the vmlane plugin binary (required)
//	-ref DIR         folder holding the reference bridge and host-local
//	                 binaries (required)
//	-vmlaned PATH    vmlaned: adds the target vmlane+vmlaned, vmlane with
//	                 a standalone vmlaned running in its node namespace on
//	                 the same lease file (--anti-spoof-period 2s)
//	-floor PATH      the netlinkfloor plugin (internal/bench/netlinkfloor):
//	                 adds the targets floor and floor-vm, the same kernel
//	                 work as vmlane's ADD and nothing else, and a table of
//	                 vmlane's ADD over theirs (goal: p50 at most 1.5)
//	-n N             timed iterations per target and mode (default 150)
//	-concurrency C   workers of the concurrent mode, and pod namespaces per
//	                 target (default 16)
//	-warmup W        uncounted iterations per target before timing (default 5)
//	-rounds R        turns the targets take within each mode (default 4)
//	-churn-ids K     container IDs the same-IDs modes cycle through, a
//	                 multiple of -concurrency (default 64)
//
// # Targets
//
// The plugin configs run in the same process, each with the same kind of
// node: a fresh "node" network namespace of its own that holds its bridge
// (so bridges never collide), and the same subnet, 10.251.0.0/16.
//
//	vmlane             vmlane, "vm": false: veth, address in the pod
//	vmlane-vm          vmlane, "vm": true: veth, TAP, tc redirect both ways
//	bridge+host-local  bridge, isGateway, no ipMasq; host-local IPAM
//	vmlane+vmlaned     vmlane with vmlaned beside it (with -vmlaned)
//	floor, floor-vm    netlinkfloor (with -floor), plain and VM
//
// vmlane's lease file, host-local's dataDir and libcni's cache live in one
// temp folder, so both stores sit on the same file system.
//
// # Method
//
// An iteration is one ADD and then one DEL of a new attachment (its own
// container ID) in a pod namespace; ADD and DEL are timed separately around
// the libcni call, from a thread already switched into the node namespace
// (libcni execs the plugin from it, so the plugin runs there). Each target
// first runs -warmup uncounted iterations, which also create its bridge.
// Then come -n sequential iterations per target, then -n concurrent ones
// per target shared among -concurrency workers. Within a mode the targets
// take -rounds turns of -n/rounds iterations each, so that a burst of
// other load on the machine is shared by all rather than spoiling one.
//
// Two more modes repeat container IDs, as a runtime that retries or a
// kubelet that restarts does: "sequential, same IDs" and "concurrent(C),
// same IDs" cycle through -churn-ids IDs (an ID is always the same
// worker's). An untimed first round adds and deletes each ID once, so
// every timed ADD is of an ID added and deleted before. They guard what
// DEL leaves behind on purpose (vmlane's anti-spoofing entry, which
// vmlaned sweeps in batches): an ADD must not pay for it. The ratio table's
// wall column is each mode's ADD+DEL wall time over the reference's.
//
// Pod namespaces come from a pool of -concurrency namespaces made before
// the timed region and used round robin (a concurrent worker always uses
// its own). After DEL a pod namespace holds nothing but lo again, so a
// reused one is as good as a fresh one. A fresh one per iteration would
// cost little (`ip netns add` takes about 16 ms, untimed), but the kernel
// frees a deleted namespace later, in its cleanup_net worker, which would
// then compete with the timed calls.
//
// p50 and p99 are nearest-rank percentiles. ops/s is n / (Σ latency /
// workers): for a sequential run, 1 / mean latency; for a concurrent run,
// the total throughput of that operation with every worker busy. The
// progress lines on stderr also give each target's plugin CPU time (user +
// system of the plugin processes and what they ran) per ADD+DEL, which
// other load on the machine moves far less than latency.
//
// After the run the bench checks, per target, that nothing is left: no
// lease in the lease file or host-local's dataDir, no link in the node
// namespace but lo and the bridge, nothing but lo in any pod namespace, no
// entry in libcni's cache. A leak is a failure.
//
// # Namespaces and cleanup
//
// It must run as root, and touches nothing of the host's own: every link,
// address, route and sysctl it causes lives in a namespace it made. Those
// are named vmlb-<pid>-<n>-<tag>, and the temp folder (lease files and
// all) cnibench-<pid>-*; both are deleted on exit and on SIGINT or SIGTERM
// (a second signal kills at once), and each run first deletes those of
// earlier runs whose process is gone.
//
// It exits 1 on any failure or leak, 2 on bad flags. It is Linux only.
package main
