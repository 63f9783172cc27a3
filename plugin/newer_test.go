package plugin

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestNewerVmlanesLeaseIsLeftAlone: when a newer vmlane put an attachment's
// lease in a state this version does not know, this plugin neither hands
// the attachment that lease (a retried ADD fails, CHECK finds none) nor a
// second one, nor gives its address to another pod, and its GC and DEL
// leave the lease (and GC the link) to a version that knows the state.
func TestNewerVmlanesLeaseIsLeftAlone(t *testing.T) {
	h := newHarness(t, nil)
	a, b := att("a"), att("b")
	prev := h.mustAddPrev(a)
	data, err := os.ReadFile(h.leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	newer := strings.Replace(string(data), `"state":"reserved"`, `"state":"quarantined"`, 1)
	if err := os.WriteFile(h.leaseFile, []byte(newer), 0o644); err != nil {
		t.Fatal(err)
	}
	quarantined := "10.244.3.2 mac=02:76:0a:f4:03:02 quarantined cni attachment=a/eth0 netns=/run/netns/a"
	h.wantLeases(quarantined)

	if _, err := h.add(a, nil); err == nil || !strings.Contains(err.Error(), `"quarantined"`) {
		t.Errorf("retried ADD of a: %v, want it refused naming the state", err)
	}
	if err := h.other("CHECK", h.p.Check, a, map[string]any{"prevResult": prev}); err == nil {
		t.Error("CHECK of a passed on a lease this version does not know")
	}
	h.mustAdd(b, nil)
	h.wantLeases(quarantined, "10.244.3.3 mac=02:76:0a:f4:03:03 reserved cni attachment=b/eth0 netns=/run/netns/b")

	calls := len(h.dp.callLog())
	if err := h.other("GC", h.p.GC, attachment{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := h.dp.callLog()[calls:]; slices.Contains(got, "DeleteHostLink("+a.veth()+")") {
		t.Errorf("GC deleted a's host veth: %v", got)
	}
	h.wantLeases(quarantined)
	if err := h.del(a, nil); err != nil {
		t.Fatalf("DEL of a: %v", err)
	}
	h.wantLeases(quarantined)
}
