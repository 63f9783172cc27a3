package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// apiClient is the least a test needs to talk to the apiserver without
// client-go: bearer token, the CA, and a dialer.
type apiClient struct {
	t     *testing.T
	base  string
	token string
	hc    *http.Client
}

func newAPIClient(t *testing.T, base, token string, ca []byte, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *apiClient {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatal("no certificate in the control plane's CA PEM")
	}
	tr := &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(tr.CloseIdleConnections)
	return &apiClient{t: t, base: base, token: token, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// do sends a request with body (JSON, if not nil), checks the status and
// decodes the answer into out (if not nil).
func (c *apiClient) do(method, path string, body any, wantStatus int, out any) {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	if resp.StatusCode != wantStatus {
		c.t.Fatalf("%s %s: %s, want %d: %s", method, path, resp.Status, wantStatus, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatalf("%s %s: decoding %s: %v", method, path, data, err)
		}
	}
}

// node is the part of a v1.Node these tests look at.
type node struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		PodCIDR  string   `json:"podCIDR,omitempty"`
		PodCIDRs []string `json:"podCIDRs,omitempty"`
	} `json:"spec"`
}

type nodeList struct {
	Kind  string `json:"kind"`
	Items []node `json:"items"`
}

// nodeCIDRs lists the nodes as name → podCIDRs.
func (c *apiClient) nodeCIDRs() map[string][]string {
	c.t.Helper()
	var l nodeList
	c.do(http.MethodGet, "/api/v1/nodes", nil, http.StatusOK, &l)
	if l.Kind != "NodeList" {
		c.t.Fatalf("GET /api/v1/nodes: kind %q, want NodeList", l.Kind)
	}
	got := map[string][]string{}
	for _, n := range l.Items {
		got[n.Metadata.Name] = n.Spec.PodCIDRs
	}
	return got
}

func TestNodesSurviveAPIServerRestart(t *testing.T) {
	cp := Start(t, Options{})
	cc := cp.Client()
	c := newAPIClient(t, cc.Host, cc.BearerToken, cc.CAData, cc.Dial)

	var version struct{ Major, Minor, GitVersion string }
	c.do(http.MethodGet, "/version", nil, http.StatusOK, &version)
	if version.Major != "1" || version.GitVersion == "" || version.GitVersion == "v0.0.0-master+$Format:%H$" {
		t.Errorf("GET /version = %+v, want a real v1.x release (build.sh sets it with -ldflags)", version)
	}
	t.Logf("kube-apiserver %s", version.GitVersion)

	if diff := cmp.Diff(map[string][]string{}, c.nodeCIDRs()); diff != "" {
		t.Errorf("nodes before create (-want +got):\n%s", diff)
	}

	n := json.RawMessage(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"},"spec":{"podCIDR":"10.244.1.0/24","podCIDRs":["10.244.1.0/24"]}}`)
	var created node
	c.do(http.MethodPost, "/api/v1/nodes", n, http.StatusCreated, &created)
	if created.Metadata.Name != "n1" || created.Spec.PodCIDR != "10.244.1.0/24" {
		t.Errorf("POST /api/v1/nodes returned %+v", created)
	}
	// A second create of the same name is a conflict, as for a real node.
	c.do(http.MethodPost, "/api/v1/nodes", n, http.StatusConflict, nil)

	want := map[string][]string{"n1": {"10.244.1.0/24"}}
	if diff := cmp.Diff(want, c.nodeCIDRs()); diff != "" {
		t.Errorf("nodes after create (-want +got):\n%s", diff)
	}

	cp.Restart()
	if diff := cmp.Diff(want, c.nodeCIDRs()); diff != "" {
		t.Errorf("nodes after apiserver restart (-want +got):\n%s", diff)
	}

	// While the apiserver is down, connections are refused rather than
	// hanging: what a client's retry logic must cope with.
	cp.StopAPIServer()
	conn, err := cp.Dial(context.Background(), "tcp", netip.AddrPortFrom(cp.host, APIServerPort).String())
	if err == nil {
		conn.Close()
		t.Errorf("dialing a stopped apiserver succeeded")
	}
	cp.StartAPIServer()
	if diff := cmp.Diff(want, c.nodeCIDRs()); diff != "" {
		t.Errorf("nodes after apiserver stop and start (-want +got):\n%s", diff)
	}
}

// TestSwitch puts the apiserver on a bridge, as a node would see it, and
// talks to it from another namespace on the same bridge.
func TestSwitch(t *testing.T) {
	sw := netnstest.New(t, "sw")
	sw.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
	sw.MustRun(t, "ip", "link", "set", "br0", "up")

	cp := Start(t, Options{
		Addr:         netip.MustParsePrefix("10.99.0.1/24"),
		SwitchNS:     sw.Name,
		SwitchBridge: "br0",
	})
	if want := "https://10.99.0.1:6443"; cp.URL != want {
		t.Errorf("URL = %s, want %s", cp.URL, want)
	}

	nodeNS := netnstest.New(t, "node")
	steps := [][]string{
		{"-n", nodeNS.Name, "link", "add", "eth0", "type", "veth", "peer", "name", "node0", "netns", sw.Name},
		{"-n", sw.Name, "link", "set", "node0", "master", "br0", "up"},
		{"-n", nodeNS.Name, "addr", "add", "10.99.0.2/24", "dev", "eth0"},
		{"-n", nodeNS.Name, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			t.Fatal(err)
		}
	}

	// The node's namespace, not the control plane's: the bridge carries it.
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := nodeNS.Do(func() error {
			var d net.Dialer
			var err error
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
	c := newAPIClient(t, cp.URL, cp.Token, cp.CACert, dial)
	// The bridge may still be learning; the first SYN can take a moment.
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := dial(context.Background(), "tcp", "10.99.0.1:6443")
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node cannot reach the apiserver over the bridge: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if diff := cmp.Diff(map[string][]string{}, c.nodeCIDRs()); diff != "" {
		t.Errorf("nodes over the bridge (-want +got):\n%s", diff)
	}
}
