package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vmlane/vmlane/internal/testing/controlplane"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/internal/testing/testvm"
)

// Addresses on the test switch: the API server, the nodes from NodeBase
// up, and the outside world.
var (
	SwitchSubnet = netip.MustParsePrefix("10.99.0.0/24")
	APIServerIP  = netip.MustParseAddr("10.99.0.1")
	OutsideIP    = netip.MustParseAddr("10.99.0.254")
	// The switch is dual-stack: nodes and the outside host have an IPv6
	// address too (a unique local one, never routed beyond this machine).
	SwitchSubnet6 = netip.MustParsePrefix("fd99::/64")
	OutsideIP6    = netip.MustParseAddr("fd99::fe")
)

// DefaultClusterCIDR and DefaultClusterCIDR6 are the pod networks the
// nodes' podCIDRs come from.
var (
	DefaultClusterCIDR  = netip.MustParsePrefix("10.244.0.0/16")
	DefaultClusterCIDR6 = netip.MustParsePrefix("fd00:10:244::/56")
)

// The ServiceAccount the manifests give vmlaned, whose token every node's
// vmlaned uses, so the suite runs with the manifests' RBAC and nothing more.
const (
	Namespace      = "vmlane-system"
	ServiceAccount = "vmlane"
)

// NodeSpec is one node: its name, its podCIDRs and its addresses on the
// switch. PodCIDR6 and IP6 are zero on an IPv4-only node.
type NodeSpec struct {
	Name     string
	PodCIDR  netip.Prefix
	IP       netip.Addr
	PodCIDR6 netip.Prefix
	IP6      netip.Addr
}

// DefaultNodes returns n dual-stack nodes, node-a, node-b, ..., with
// podCIDRs 10.244.<i>.0/24 and fd00:10:244:<i>::/64, and addresses
// 10.99.0.<11+i> and fd99::<11+i>.
func DefaultNodes(n int) []NodeSpec {
	var ns []NodeSpec
	for i := range n {
		ns = append(ns, NodeSpec{
			Name:     "node-" + string(rune('a'+i)),
			PodCIDR:  netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24),
			IP:       netip.AddrFrom4([4]byte{10, 99, 0, byte(11 + i)}),
			PodCIDR6: netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 0x02, 0x44, 0, byte(i)}), 64),
			IP6:      netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x99, 15: byte(0x11 + i)}),
		})
	}
	return ns
}

// PodCIDRs are the node's podCIDRs, IPv4 first, as spec.podCIDRs lists
// them.
func (s NodeSpec) PodCIDRs() []netip.Prefix {
	if s.PodCIDR6.IsValid() {
		return []netip.Prefix{s.PodCIDR, s.PodCIDR6}
	}
	return []netip.Prefix{s.PodCIDR}
}

// Options shape a cluster.
type Options struct {
	// BinDir holds vmlane, vmlaned and vmlanectl.
	BinDir string
	// FlannelDir holds flanneld (internal/testing/realnode/build-flannel.sh), for
	// real nodes with Flannel set.
	FlannelDir string
	// DeferOverlay leaves applying Overlay to the suite (ApplyOverlay), so
	// it can look at the nodes before vmlane is there.
	DeferOverlay bool
	// Manifests is the kustomize base (the repository's manifests/): it is
	// applied to the API server, and vmlaned runs with its
	// ServiceAccount's token.
	Manifests string
	// Nodes are created in order; each runs vmlaned.
	Nodes []NodeSpec
	// ClusterCIDR is vmlaned's --cluster-cidr (DefaultClusterCIDR if zero),
	// with ClusterCIDR6 (DefaultClusterCIDR6 if zero) when a node is
	// dual-stack.
	ClusterCIDR  netip.Prefix
	ClusterCIDR6 netip.Prefix
	// DaemonArgs are more flags for every node's vmlaned (such as
	// --cross-subnet).
	DaemonArgs []string
	// Log gets a line per step; nil discards.
	Log io.Writer
	// VMTimeout bounds each guest's life (default 10 minutes).
	VMTimeout time.Duration

	// For [NewReal]:
	// RealNodes are the real nodes, started in order.
	RealNodes []RealNodeSpec
	// Overlay is the kustomization applied instead of Manifests: the
	// manifests with the image built here (e2e/overlay).
	Overlay string
	// Images are the image tarballs every node's containerd imports
	// (`make image`): vmlane's, the pause image and the test image.
	Images []string
	// CNIBinDir holds the loopback CNI plugin that a node's runtime
	// package would have installed in /opt/cni/bin.
	CNIBinDir string
	// CoreDNSDir, when set, holds CoreDNS's image (build-coredns.sh's
	// output for one version): every node imports it and the cluster runs
	// it as its DNS (ClusterDNS).
	CoreDNSDir string
}

// newCluster checks what either kind of cluster needs (the commands, the
// control plane's binaries, the test guest), fills in o's defaults and
// returns the cluster, with nothing started yet.
func newCluster(tb testing.TB, o Options, commands ...string) *Cluster {
	tb.Helper()
	privtest.Require(tb, commands...)
	bins, err := controlplane.Find()
	if err != nil {
		privtest.Missing(tb, err.Error())
	}
	guest, err := testvm.Find()
	if err != nil {
		privtest.Missing(tb, err.Error())
	}
	if !o.ClusterCIDR.IsValid() {
		o.ClusterCIDR = DefaultClusterCIDR
	}
	if !o.ClusterCIDR6.IsValid() {
		o.ClusterCIDR6 = DefaultClusterCIDR6
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.VMTimeout == 0 {
		o.VMTimeout = 10 * time.Minute
	}
	c := &Cluster{Opts: o, tb: tb, guest: guest, bins: bins, dir: tb.TempDir(), KubectlPath: bins.Kubectl}
	// The key of the live-migration notices the nodes' vmlaned send one
	// another (--peer-key-file), as the Secret vmlane-peer holds it in a
	// cluster of real nodes.
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		tb.Fatal(err)
	}
	c.peerKeyFile = filepath.Join(c.dir, "peer-key")
	if err := os.WriteFile(c.peerKeyFile, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return c
}

// startControlPlane makes the switch and starts the control plane on it
// with cpOpts (the switch fields filled in here), and an admin client.
func (c *Cluster) startControlPlane(tb testing.TB, cpOpts controlplane.Options) {
	tb.Helper()
	c.step("switch")
	c.Switch = netnstest.New(tb, "sw")
	c.Switch.MustRun(tb, "ip", "link", "add", "sw0", "type", "bridge")
	c.Switch.MustRun(tb, "ip", "link", "set", "sw0", "up")

	what := "etcd, kube-apiserver"
	if cpOpts.ClusterCIDR.IsValid() {
		what += ", kube-controller-manager, kube-scheduler"
	}
	c.step("control plane (%s) at %s", what, APIServerIP)
	cpOpts.Addr, cpOpts.SwitchNS, cpOpts.SwitchBridge = netip.PrefixFrom(APIServerIP, SwitchSubnet.Bits()), c.Switch.Name, "sw0"
	c.CP = controlplane.Start(tb, cpOpts)
	cc := c.CP.Client()
	var err error
	c.Client, err = kubernetes.NewForConfig(&rest.Config{
		Host: cc.Host, BearerToken: cc.BearerToken, TLSClientConfig: rest.TLSClientConfig{CAData: cc.CAData},
		Dial: cc.Dial, QPS: 50, Burst: 100,
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// Cluster is a control plane, a switch, an outside host and nodes, each a
// network namespace on this machine. Everything it makes is removed by the
// cleanups it registers with the testing.TB it was built with.
type Cluster struct {
	Opts    Options
	Switch  *netnstest.NS
	Outside *netnstest.NS
	// Router is the router to the far subnet, when a node is there
	// (FarNode); nil otherwise.
	Router *netnstest.NS
	CP     *controlplane.ControlPlane
	// Client is an admin client (the test's view of the API server).
	Client kubernetes.Interface
	// KubectlPath is the kubectl built with the control plane.
	KubectlPath string
	// NodeKubeconfig has a token of vmlaned's ServiceAccount bound to no
	// pod, for checks of its RBAC; each node's vmlaned runs with its own,
	// bound to a pod on its node (Node.Kubeconfig).
	NodeKubeconfig string
	Nodes          []*Node
	// RealNodes are the nodes of a cluster made by [NewReal].
	RealNodes []*RealNode

	tb    testing.TB
	guest testvm.Guest
	bins  controlplane.Binaries
	dir   string
	// peerKeyFile is the nodes' --peer-key-file.
	peerKeyFile string
}

// New builds the cluster: switch, control plane, manifests applied, the
// outside host, and every node running vmlaned with its conflists written.
func New(tb testing.TB, o Options) *Cluster {
	tb.Helper()
	c := newCluster(tb, o, "ip", "iptables", "qemu-system-x86_64", "nsenter", "busybox")
	c.startControlPlane(tb, controlplane.Options{})

	c.step("manifests: kubectl apply --server-side -k %s", o.Manifests)
	c.MustKubectl(tb, "apply", "--server-side", "-k", o.Manifests)
	c.NodeKubeconfig = c.serviceAccountKubeconfig(tb)

	c.addOutside(tb, "a host beyond the pod network")
	for _, s := range o.Nodes {
		if Far(s.IP) && c.Router == nil {
			c.addRouter(tb)
		}
	}

	for _, s := range o.Nodes {
		c.AddNode(tb, s)
	}
	return c
}

func (c *Cluster) step(format string, args ...any) {
	fmt.Fprintf(c.Opts.Log, "• "+format+"\n", args...)
}

// addOutside makes the outside host at OutsideIP, which serves
// /cgi-bin/whoami; role says what it stands for in this cluster.
func (c *Cluster) addOutside(tb testing.TB, role string) {
	tb.Helper()
	c.step("outside host %s and %s, %s (serves /cgi-bin/whoami)", OutsideIP, OutsideIP6, role)
	c.Outside = c.host(tb, "out", netip.PrefixFrom(OutsideIP, SwitchSubnet.Bits()), netip.PrefixFrom(OutsideIP6, SwitchSubnet6.Bits()))
	ServeWhoAmI(tb, c.Outside, filepath.Join(c.dir, "outside-www"))
}

// host makes a namespace with eth0 on the switch (sw1 for an address on
// the far subnet) at addr and, if valid, addr6.
func (c *Cluster) host(tb testing.TB, tag string, addr netip.Prefix, addr6 ...netip.Prefix) *netnstest.NS {
	tb.Helper()
	n := netnstest.New(tb, tag)
	peer := "sw-" + tag
	bridge := "sw0"
	if Far(addr.Addr()) {
		bridge = "sw1"
	}
	c.Switch.MustRun(tb, "ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0")
	c.Switch.MustRun(tb, "ip", "link", "set", "eth0", "netns", n.Name)
	c.Switch.MustRun(tb, "ip", "link", "set", peer, "master", bridge, "up")
	n.MustRun(tb, "ip", "addr", "add", addr.String(), "dev", "eth0")
	for _, a := range addr6 {
		if a.IsValid() {
			n.MustRun(tb, "ip", "addr", "add", a.String(), "dev", "eth0", "nodad")
		}
	}
	n.MustRun(tb, "ip", "link", "set", "eth0", "up")
	return n
}

// Kubectl runs kubectl against the API server as admin, from the control
// plane's namespace (the only place besides the switch that reaches it).
func (c *Cluster) Kubectl(args ...string) (string, error) {
	return c.KubectlWith(c.CP.Kubeconfig, args...)
}

// KubectlWith is Kubectl with another kubeconfig.
func (c *Cluster) KubectlWith(kubeconfig string, args ...string) (string, error) {
	return c.kubectl(kubeconfig, nil, args...)
}

// kubectl runs kubectl with kubeconfig and stdin (nil: none) from the
// control plane's namespace.
func (c *Cluster) kubectl(kubeconfig string, stdin io.Reader, args ...string) (string, error) {
	argv := append([]string{"netns", "exec", c.CP.NetNS, c.KubectlPath, "--kubeconfig", kubeconfig}, args...)
	cmd := exec.Command("ip", argv...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// MustKubectl is Kubectl that fails tb on error.
func (c *Cluster) MustKubectl(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := c.Kubectl(args...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the
// manifests' ServiceAccount, from the TokenRequest API, bound to no pod:
// the ServiceAccount's RBAC, for checks of it.
func (c *Cluster) serviceAccountKubeconfig(tb testing.TB) string {
	tb.Helper()
	return c.writeTokenKubeconfig(tb, "vmlane-sa.kubeconfig", nil)
}

// nodeKubeconfig writes the kubeconfig node's vmlaned runs with: a token
// of the manifests' ServiceAccount bound to a pod on node, as the kubelet
// projects one into the DaemonSet's pod there. The API server then names
// the node in each of its requests (authentication.kubernetes.io/node-name),
// which the VMClaim admission policy needs to let it write its node's
// claims. The pod, vmlane-NODE in vmlane's namespace, stands for the
// DaemonSet's; no kubelet runs it, and the token lasts as long as it.
func (c *Cluster) nodeKubeconfig(tb testing.TB, node string) string {
	tb.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vmlane-" + node, Namespace: Namespace},
		Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: ServiceAccount,
			Containers: []corev1.Container{{Name: "vmlaned", Image: "vmlane:e2e"}},
		},
	}
	pod, err := c.Client.CoreV1().Pods(Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("node %s: the pod vmlaned's token is bound to: %v", node, err)
	}
	return c.writeTokenKubeconfig(tb, "vmlane-"+node+".kubeconfig", pod)
}

// writeTokenKubeconfig writes a kubeconfig named name with a token of the
// manifests' ServiceAccount, bound to pod unless it is nil.
func (c *Cluster) writeTokenKubeconfig(tb testing.TB, name string, pod *corev1.Pod) string {
	tb.Helper()
	ttl := int64(24 * 3600)
	req := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &ttl}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := c.Client.CoreV1().ServiceAccounts(Namespace).CreateToken(context.Background(), ServiceAccount, req, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("token for ServiceAccount %s/%s: %v", Namespace, ServiceAccount, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.CP.URL, CertificateAuthorityData: c.CP.CACert}
	cfg.AuthInfos["vmlane"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["vmlane"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "vmlane"}
	cfg.CurrentContext = "vmlane"
	path := filepath.Join(c.dir, name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		tb.Fatal(err)
	}
	return path
}

// ServeWhoAmI runs busybox httpd on port 80 in ns, answering
// /cgi-bin/whoami with the client's address as the server sees it: the
// suite's proof of what NAT did or did not do.
func ServeWhoAmI(tb testing.TB, ns *netnstest.NS, dir string) {
	tb.Helper()
	cgi := filepath.Join(dir, "cgi-bin")
	if err := os.MkdirAll(cgi, 0o755); err != nil {
		tb.Fatal(err)
	}
	// busybox httpd listens on a dual-stack socket: an IPv4 client's
	// REMOTE_ADDR reads [::ffff:a.b.c.d]. Print the address itself.
	script := `#!/bin/sh
a=${REMOTE_ADDR#[}
a=${a%]}
printf 'Content-Type: text/plain\r\n\r\n%s\n' "${a#::ffff:}"
`
	if err := os.WriteFile(filepath.Join(cgi, "whoami"), []byte(script), 0o755); err != nil {
		tb.Fatal(err)
	}
	cmd := ns.Command("busybox", "httpd", "-f", "-p", "80", "-h", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
}

// Routes returns node n's IPv4 vmlane routes as `ip route show proto 77`
// prints them, one a line.
func (n *Node) Routes() string {
	out, _ := n.NS.Run("ip", "route", "show", "proto", "77")
	return strings.TrimSpace(out)
}

// Routes6 returns node n's IPv6 vmlane routes, one a line.
func (n *Node) Routes6() string {
	out, _ := n.NS.Run("ip", "-6", "route", "show", "proto", "77")
	return strings.TrimSpace(out)
}

// RouteCount is the number of vmlane routes on n.
func (n *Node) RouteCount() int {
	r := n.Routes()
	if r == "" {
		return 0
	}
	return strings.Count(r, "\n") + 1
}

// CreateNodeObject creates the Node object of s with its podCIDR,
// InternalIP and Ready condition, as the kubelet and the node IPAM
// controller would.
func (c *Cluster) CreateNodeObject(tb testing.TB, s NodeSpec) {
	tb.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Labels: map[string]string{"kubernetes.io/os": "linux"}}}
	n.Spec.PodCIDR = s.PodCIDR.String()
	for _, p := range s.PodCIDRs() {
		n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, p.String())
	}
	n, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("creating Node %s: %v", s.Name, err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: s.IP.String()}}
	if s.IP6.IsValid() {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: s.IP6.String()})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: s.Name})
	// Ready, as its kubelet would report it: vmlaned takes a VM whose
	// claim names a Node that is not Ready for one that is not running.
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "the e2e suite's node", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := c.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		tb.Fatalf("setting Node %s's address: %v", s.Name, err)
	}
}

// DeleteNodeObject deletes the Node object named name.
func (c *Cluster) DeleteNodeObject(tb testing.TB, name string) {
	tb.Helper()
	if err := c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		tb.Fatalf("deleting Node %s: %v", name, err)
	}
}

// Node returns the node named name, nil if there is none.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Eventually polls cond every 100 ms for up to a minute (the API server,
// vmlaned and QEMU share two cores) and fails tb with what cond saw last.
func Eventually(tb testing.TB, what string, cond func() (bool, string)) {
	tb.Helper()
	var last string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	tb.Fatalf("%s: not within a minute; last seen:\n%s", what, last)
}
