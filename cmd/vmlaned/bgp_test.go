//go:build linux || darwin

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestBGPConfig: the flags, with the Node's annotations over them, the
// router ID and next hops from the Node's addresses, and the password
// from its file.
func TestBGPConfig(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	c, err := parseFlags([]string{"--node-name", "a", "--cross-subnet", "bgp", "--bgp-asn", "64513", "--bgp-peer", "10.99.0.253:64512",
		"--bgp-peer", "[fd99::fd]:64512", "--bgp-password-file", pw}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "fd99::11"}, {Type: corev1.NodeInternalIP, Address: "10.99.0.11"}}}}
	cfg, err := bgpConfig(c, node)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ASN != 64513 || len(cfg.Peers) != 2 || cfg.RouterID.String() != "10.99.0.11" || cfg.NextHop4.String() != "10.99.0.11" ||
		cfg.NextHop6.String() != "fd99::11" || (cfg.Password != "s3cret") {
		t.Errorf("config from flags: %+v", cfg)
	}
	node.Annotations = map[string]string{"vmlane.io/bgp-asn": "64514", "vmlane.io/bgp-peers": "[fd98::1]:64512"}
	if cfg, err = bgpConfig(c, node); err != nil || cfg.ASN != 64514 || len(cfg.Peers) != 1 || cfg.Peers[0].Addr.String() != "fd98::1" {
		t.Errorf("config with annotations: %+v, %v", cfg, err)
	}
	for ann, want := range map[string]string{
		"vmlane.io/bgp-asn":   `node a annotation vmlane.io/bgp-asn="x": ASN "x" is not 1-4294967294`,
		"vmlane.io/bgp-peers": `node a annotation vmlane.io/bgp-peers="x": peer "x": want ADDR:ASN`,
	} {
		node.Annotations = map[string]string{ann: "x"}
		if _, err := bgpConfig(c, node); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("annotation %s=x: %v, want %q", ann, err, want)
		}
	}
	node.Annotations = nil
	os.WriteFile(pw, []byte("\n"), 0o600)
	if _, err := bgpConfig(c, node); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty password file: %v", err)
	}
	c.BGPPasswordFile = ""
	node.Status.Addresses = node.Status.Addresses[:1] // IPv6 only: no router ID
	if _, err := bgpConfig(c, node); err == nil || !strings.Contains(err.Error(), "no router ID: the node has no IPv4 address; set --bgp-router-id") {
		t.Errorf("no IPv4 address: %v", err)
	}
}
