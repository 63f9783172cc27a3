package plugin_test

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// TestHostPortChainedPortmap: vmlane chained with the reference portmap
// plugin, as vmlaned's conflists are: a pod's hostPort (the runtime's
// portMappings capability) reaches the pod at the node's address; DEL
// removes the mapping; and GC, for a pod whose DEL never came, has portmap
// remove it too (portmap implements no GC of its own).
func TestHostPortChainedPortmap(t *testing.T) {
	n := newNode(t, "10.77.4.0/24")
	if _, err := os.Stat(filepath.Join(pluginDir(t), "portmap")); err != nil {
		privtest.Missing(t, "the portmap plugin is not beside vmlane in "+pluginDir(t)+" (make build installs it)")
	}
	privtest.Require(t, "iptables")
	raw, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "vmlane", "plugins": []any{
		map[string]any{"type": "vmlane", "subnet": n.subnet, "leaseFile": n.leases, "portMap": true,
			"capabilities": map[string]bool{"mac": true, "ips": true}},
		map[string]any{"type": "portmap", "snat": true, "capabilities": map[string]bool{"portMappings": true}},
	}})
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	pod := netnstest.New(t, "pod")
	rt := podRT("hp1", pod)
	rt.CapabilityArgs = map[string]any{"portMappings": []map[string]any{{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}}}
	if _, err := n.add(list, rt); err != nil {
		t.Fatal(err)
	}
	// The pod listens on 80; the node dials its own bridge address on
	// 18080 (portmap's OUTPUT path, the one a node-local client takes).
	var ln net.Listener
	if err := pod.Do(func() (err error) { ln, err = net.Listen("tcp", ":80"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("pod hp1\n"))
			c.Close()
		}
	}()
	dial := func() (string, error) {
		var got string
		err := n.ns.Do(func() error {
			c, err := net.DialTimeout("tcp", "10.77.4.1:18080", 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			b := make([]byte, 64)
			k, err := c.Read(b)
			got = string(b[:k])
			return err
		})
		return got, err
	}
	if got, err := dial(); err != nil || !strings.Contains(got, "pod hp1") {
		t.Fatalf("node → its hostPort 18080: %q, %v; want the pod's answer", got, err)
	}
	dnat := func() string { return n.ns.MustRun(t, "iptables", "-t", "nat", "-S") }
	if !strings.Contains(dnat(), `id: \"hp1\"`) {
		t.Fatalf("no portmap rule for hp1:\n%s", dnat())
	}

	// DEL removes it.
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dnat(), `id: \"hp1\"`) {
		t.Errorf("DEL left the mapping:\n%s", dnat())
	}

	// A pod whose DEL never comes: GC removes its mapping.
	pod2 := netnstest.New(t, "pod2")
	rt2 := podRT("hp2", pod2)
	rt2.CapabilityArgs = rt.CapabilityArgs
	if _, err := n.add(list, rt2); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dnat(), `id: \"hp2\"`) {
		t.Fatalf("no portmap rule for hp2:\n%s", dnat())
	}
	if err := n.gc(list); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dnat(), `id: \"hp2\"`) {
		t.Errorf("GC left the mapping of a pod it collected:\n%s", dnat())
	}
}
