package main

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/vmlane/vmlane/routes"
)

// BenchmarkClaimsPass is the part of a claims pass that grows with the
// cluster, at benchVMs claims checked against benchNodes podCIDRs (a
// cluster without --cluster-cidr): reading the claims from the informer's
// cache, checking them (apply) and writing the plugin's copy. "unchanged"
// is a pass that finds every claim as it was (the copy is not written);
// "one moved" one whose claim of one VM names another node, as at a move
// (the copy is written), the informer's handler noting its key as in
// vmlaned; "one moved, whole list" the same without the noted keys, as
// before they were (every claim read, sorted and checked).
func BenchmarkClaimsPass(b *testing.B) {
	var pods []netip.Prefix
	for i := range benchNodes {
		pods = append(pods, benchPodCIDR(i))
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	object := func(i, node, rv int) *unstructured.Unstructured {
		a := benchVMAddr(i).As4()
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "vmlane.io/v1alpha1", "kind": "VMClaim",
			"metadata": map[string]any{"name": benchVMName(i), "namespace": "default", "resourceVersion": fmt.Sprint(rv)},
			"status": map[string]any{
				"ipv4": netip.PrefixFrom(benchVMAddr(i), 24).String(), "mac": fmt.Sprintf("02:76:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3]),
				"node": fmt.Sprintf("n%04d", node), "pod": "default/" + benchVMName(i),
			},
		}}
	}
	for i := range benchVMs {
		if err := store.Add(object(i, benchVMHolder(i), 1)); err != nil {
			b.Fatal(err)
		}
	}
	// The cluster's Nodes, each Ready with its podCIDR (a claim naming a
	// node that does not exist is not used).
	nodes := &fakeNodes{byName: map[string]routes.Node{}}
	for i := range benchNodes {
		name := fmt.Sprintf("n%04d", i)
		nodes.byName[name] = routes.Node{Name: name, Ready: true, PodCIDRs: []netip.Prefix{benchPodCIDR(i)}}
	}
	changes := &claimChanges{}
	s := &claimsSync{c: &config{NodeName: "a", LeaseFile: filepath.Join(b.TempDir(), "leases.json"), ClusterCIDRs: pods}, claims: store,
		changes: changes, nodes: nodes, warned: map[string]string{}}
	pass := func() int {
		vms, mirror, _ := s.apply(s.list())
		s.writeMirror(mirror, true)
		return len(vms)
	}
	if n := pass(); n != benchVMs {
		b.Fatalf("%d VMs routed, want %d: %v", n, benchVMs, s.warned)
	}
	b.Run("unchanged", func(b *testing.B) {
		for b.Loop() {
			pass()
		}
	})
	rv := 1
	move := func(b *testing.B) {
		rv++
		o := object(rv%benchVMs, rv%benchNodes, rv)
		if err := store.Update(o); err != nil {
			b.Fatal(err)
		}
		changes.note(o)
	}
	b.Run("one moved", func(b *testing.B) {
		for b.Loop() {
			move(b)
			pass()
		}
	})
	b.Run("one moved, whole list", func(b *testing.B) {
		s.changes = nil
		for b.Loop() {
			move(b)
			pass()
		}
	})
}
