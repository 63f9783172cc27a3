package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Names of the files writePKI puts in its directory, as the apiserver flags
// name them.
const (
	caCertFile     = "ca.crt"
	servingCert    = "apiserver.crt"
	servingKey     = "apiserver.key"
	saKeyFile      = "sa.key"
	saPubFile      = "sa.pub"
	tokenFile      = "tokens.csv"
	kubeconfigFile = "kubeconfig"
)

// adminUser is the user the token authenticates as. Its group
// system:masters passes every RBAC check without any binding, so tests need
// not wait for the bootstrap roles to act as admin.
const adminUser = "vmlane-admin"

// pki is what clients and the apiserver share: a CA of our own rather than
// the apiserver's self-signed --cert-dir one, so that clients verify the
// serving certificate instead of skipping verification.
type pki struct {
	CACert []byte // PEM
	Token  string
}

// serviceIP is the first address of --service-cluster-ip-range, the
// kubernetes service's ClusterIP; the serving certificate covers it as a
// real cluster's does.
var serviceIP = netip.MustParseAddr("10.96.0.1")

// writePKI writes to dir a CA, a serving certificate for ips (and the
// in-cluster names), a service account signing key and a token file with
// one admin token.
func writePKI(dir string, ips []netip.Addr) (pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}
	// Backdated an hour: the apiserver and the test share a clock, but a
	// client elsewhere (a VM guest) may not.
	notBefore := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "vmlane-test-ca"},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return pki{}, fmt.Errorf("creating CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return pki{}, err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    notBefore,
		NotAfter:     ca.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}
	for _, ip := range append([]netip.Addr{netip.MustParseAddr("127.0.0.1"), serviceIP}, ips...) {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return pki{}, fmt.Errorf("creating serving certificate: %w", err)
	}

	// ES256 service account tokens: an EC key is generated in microseconds
	// where RSA 2048 takes a noticeable share of a second.
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}

	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return pki{}, err
	}
	p := pki{
		CACert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Token:  hex.EncodeToString(tok),
	}
	files := map[string][]byte{
		caCertFile: p.CACert,
		// The chain, so a client holding only the CA verifies it.
		servingCert: append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), p.CACert...),
		servingKey:  mustPKCS8(key),
		saKeyFile:   mustPKCS8(saKey),
		saPubFile:   mustPKIX(&saKey.PublicKey),
		// token,user,uid,"group,group" (--token-auth-file).
		tokenFile: fmt.Appendf(nil, "%s,%s,%s,\"system:masters\"\n", p.Token, adminUser, adminUser),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return pki{}, err
		}
	}
	return p, nil
}

func mustPKCS8(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		panic(err) // only for unsupported key types
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func mustPKIX(k *ecdsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		panic(err) // only for unsupported key types
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// kubeconfig renders a kubeconfig for server with token auth, verifying the
// server against caPEM. It is written by hand because this package does not
// import client-go; the format is clientcmd's v1 Config.
func kubeconfig(server string, caPEM []byte, token string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Config
clusters:
- name: vmlane-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: vmlane-test
  context:
    cluster: vmlane-test
    user: %s
current-context: vmlane-test
`, server, base64.StdEncoding.EncodeToString(caPEM), adminUser, token, adminUser)
	return []byte(b.String())
}
