package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWritePKI(t *testing.T) {
	dir := t.TempDir()
	p, err := writePKI(dir, []netip.Addr{netip.MustParseAddr("10.99.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, servingCert), filepath.Join(dir, servingKey))
	if err != nil {
		t.Fatalf("the apiserver could not load its serving pair: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.CACert) {
		t.Fatal("CACert holds no certificate")
	}
	// Every name a client may use for the apiserver: the loopback URL, the
	// switch address, and the in-cluster service.
	for _, name := range []string{"127.0.0.1", "10.99.0.1", "10.96.0.1", "kubernetes.default.svc", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.99.0.2"}); err == nil {
		t.Errorf("serving certificate verifies for 10.99.0.2, which it does not name")
	}

	tokens, err := os.ReadFile(filepath.Join(dir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := p.Token + `,vmlane-admin,vmlane-admin,"system:masters"` + "\n"; string(tokens) != want {
		t.Errorf("token file = %q, want %q", tokens, want)
	}
	for _, name := range []string{saKeyFile, saPubFile, caCertFile} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: missing or empty (%v)", name, err)
		}
	}
}

func TestKubeconfig(t *testing.T) {
	got := string(kubeconfig("https://10.99.0.1:6443", []byte("PEM"), "tok"))
	for _, want := range []string{
		"    server: https://10.99.0.1:6443\n",
		"    certificate-authority-data: " + base64.StdEncoding.EncodeToString([]byte("PEM")) + "\n",
		"    token: tok\n",
		"current-context: vmlane-test\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("kubeconfig lacks %q:\n%s", want, got)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	addr := netip.MustParsePrefix("10.99.0.1/24")
	for _, tc := range []struct {
		name    string
		opts    Options
		wantErr bool
	}{
		{"loopback", Options{}, false},
		{"switch", Options{Addr: addr, SwitchNS: "sw", SwitchBridge: "br0"}, false},
		{"addr without switch", Options{Addr: addr}, true},
		{"switch without addr", Options{SwitchNS: "sw", SwitchBridge: "br0"}, true},
		{"switch without bridge", Options{Addr: addr, SwitchNS: "sw"}, true},
		{"ipv6", Options{Addr: netip.MustParsePrefix("fd00::1/64"), SwitchNS: "sw", SwitchBridge: "br0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.opts.validate(); (err != nil) != tc.wantErr {
				t.Errorf("validate() = %v, want error: %v", err, tc.wantErr)
			}
		})
	}
}

func TestFindIn(t *testing.T) {
	dir := t.TempDir()
	if _, err := FindIn(dir); err == nil || !strings.Contains(err.Error(), "make controlplane") {
		t.Errorf("FindIn(empty dir) = %v, want an error that says to run make controlplane", err)
	}
	all := []string{".stamp", "kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"}
	for i, name := range all {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
		// A build of an older recipe, without the node binaries, is
		// incomplete: every missing one is named.
		if next := i + 1; next < len(all) {
			if _, err := FindIn(dir); err == nil || !strings.Contains(err.Error(), "has no "+all[next]) {
				t.Errorf("FindIn without %s = %v, want an error naming it", all[next], err)
			}
		}
	}
	b, err := FindIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.APIServer != filepath.Join(dir, "kube-apiserver") || b.Etcd != filepath.Join(dir, "etcd") || b.Kubelet != filepath.Join(dir, "kubelet") {
		t.Errorf("FindIn = %+v", b)
	}
}
