package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/vmlane/vmlane/leases"
)

// vmClaimGVR is the VMClaim resource (manifests/base/vmclaims.yaml).
var vmClaimGVR = schema.GroupVersionResource{Group: "vmlane.io", Version: "v1alpha1", Resource: "vmclaims"}

// claimsPoll is how often the publisher looks at the lease file (a stat;
// it reads the file only when the stat changed): a VM's claim is in the
// API well within 2 s of the ADD that made its lease.
const claimsPoll = 200 * time.Millisecond

// claimsResync is how often the publisher lists the claims of the cluster
// even when its lease file did not change: a claim deleted or edited by
// hand comes back as the leases say.
const claimsResync = 30 * time.Second

// runClaims publishes this node's VM leases as VMClaims until ctx ends.
// Without the VMClaim CRD (manifests older than vmlane's VM identity) it
// says so once and keeps VM identity node-local, trying again now and then.
func runClaims(ctx context.Context, dyn dynamic.Interface, leaseFile, node string, log *slog.Logger) {
	log = log.With("component", "claims")
	api := dyn.Resource(vmClaimGVR)
	var lastStat os.FileInfo
	var lastSync time.Time
	missing := false
	t := time.NewTicker(claimsPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := os.Stat(leaseFile)
		if errors.Is(err, os.ErrNotExist) {
			continue // no lease yet
		}
		if err != nil {
			log.Warn("lease file", "err", err)
			continue
		}
		if lastStat != nil && os.SameFile(st, lastStat) && st.ModTime().Equal(lastStat.ModTime()) && st.Size() == lastStat.Size() &&
			time.Since(lastSync) < claimsResync {
			continue
		}
		snap, err := leases.Read(leaseFile)
		if err != nil {
			log.Warn("reading the lease file", "err", err)
			continue
		}
		want := leaseClaims(&snap.File, node)
		have, err := listClaims(ctx, api)
		if apierrors.IsNotFound(err) {
			if !missing {
				log.Warn("the VMClaim CRD (vmclaims.vmlane.io) is not installed: VMs keep their addresses on this node only; apply vmlane's manifests to make them cluster-wide")
				missing = true
			}
			lastStat, lastSync = st, time.Now().Add(-claimsResync+5*time.Second)
			continue
		}
		if err != nil {
			log.Warn("listing VMClaims", "err", err)
			continue
		}
		missing = false
		acts, conflicts := planClaims(want, have, node)
		for _, c := range conflicts {
			log.Warn("VM lease and VMClaim disagree; the claim is kept", "conflict", c.String())
		}
		ok := true
		for _, a := range acts {
			if err := applyClaim(ctx, api, a); err != nil {
				ok = false
				log.Warn("VMClaim", "action", a.String(), "err", err)
				continue
			}
			log.Info("VMClaim", "action", a.String())
		}
		if ok {
			lastStat, lastSync = st, time.Now()
		}
	}
}

// listClaims reads every VMClaim of the cluster.
func listClaims(ctx context.Context, api dynamic.NamespaceableResourceInterface) ([]claim, error) {
	list, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]claim, 0, len(list.Items))
	for _, it := range list.Items {
		c := claim{VM: it.GetNamespace() + "/" + it.GetName(), ResourceVersion: it.GetResourceVersion()}
		if raw, ok := it.Object["status"]; ok {
			b, _ := json.Marshal(raw)
			_ = json.Unmarshal(b, &c.Status)
		}
		out = append(out, c)
	}
	return out, nil
}

// applyClaim makes one call of the plan; update and delete only if the
// claim is still as it was read.
func applyClaim(ctx context.Context, api dynamic.NamespaceableResourceInterface, a claimAction) error {
	ns, name := splitVM(a.VM)
	if a.Op == "delete" {
		return api.Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &a.ResourceVersion}})
	}
	var status map[string]any
	b, _ := json.Marshal(a.Status)
	if err := json.Unmarshal(b, &status); err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": vmClaimGVR.GroupVersion().String(),
		"kind":       "VMClaim",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"status":     status,
	}}
	if a.Op == "create" {
		_, err := api.Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		return err
	}
	obj.SetResourceVersion(a.ResourceVersion)
	_, err := api.Namespace(ns).Update(ctx, obj, metav1.UpdateOptions{})
	return err
}
