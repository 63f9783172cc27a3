// Command vmlanectl is vmlane's operator CLI. It runs anywhere the node's
// files are visible; today it reads the lease store, which on a Linux node is
// vmlane's /var/lib/vmlane/leases.json and on a macOS node is bootpd's
// /var/db/dhcpd_leases (the two formats are told apart by content, so either
// can be given to --lease-file on either system).
//
// # Leases
//
//	vmlanectl leases list   [--lease-file FILE] [-o table|json]
//	vmlanectl leases get    (--mac MAC | --ip IP) [--lease-file FILE] [-o table|json]
//	vmlanectl leases wait   --mac MAC [--timeout DURATION] [--lease-file FILE] [-o table|json]
//	vmlanectl leases export --cocoon PATH [--lease-file FILE]
//	vmlanectl leases repair [--lease-file FILE] [--bridge NAME] [--cni-cache-dir DIR] [--subnet CIDR] [--dry-run] [--force]
//
// list prints every lease, sorted by IP. get prints the lease of a MAC or of
// an IP: by MAC it finds only a live lease (not declined, not expired), the
// one a VM runtime would use; by IP it finds the lease in any state. wait
// blocks until the MAC has a bound lease and prints it, which is what a
// script that has just started a VM wants; the lease file need not exist
// yet. export writes the live leases as the JSON array of {mac, ip, expiry}
// that cocoon-net's consumers read, replacing PATH atomically. repair
// rebuilds a damaged lease file from the node (see repair.go): the CNI
// result cache, the bridge's links, the anti-spoofing table and what still
// parses of the file; it writes under the store's lock and keeps the
// damaged file beside the new one.
//
// Flags may come before or after the command word
// (vmlanectl leases -o json list and vmlanectl leases list -o json are the
// same). The table has the columns IP, MAC, STATE, SOURCE, POD (namespace/
// name), CONTAINER (the first 12 characters of the container ID), IFNAME,
// HOSTNAME and EXPIRES (RFC 3339 UTC, "-" for a reservation held until
// released, "(expired)" after it once it has passed). A field the lease does
// not have prints as "-". With -o json, list prints the array of leases and
// get and wait print one lease, in the lease file's own field names.
//
// vmlanectl reads (all but repair) without taking the store's lock: writers replace the file
// by rename, so a read sees either the old file or the new one.
//
// # Exit status
//
// 0 on success; 1 when the command fails (the lease file is missing or
// unreadable, no lease matches, wait timed out); 2 on a usage error (unknown
// command, bad flag value), whose message names the flag and the value.
// "vmlanectl help" and --help print the usage to stderr and exit 0.
package main
