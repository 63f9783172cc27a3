// Package chart_test checks the Helm chart with the helm command built
// from the module proxy (make helm; VMLANE_HELM): what each value renders
// to, and what the values schema refuses. `make lint` runs helm lint and
// checks that manifests/ is what the chart renders.
package chart_test

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func helm(t *testing.T) string {
	t.Helper()
	h := os.Getenv("VMLANE_HELM")
	if h == "" {
		if os.Getenv("VMLANE_PRIVILEGED") == "require" {
			t.Fatal("VMLANE_HELM is not set: make helm builds helm (make test sets it)")
		}
		t.Skip("VMLANE_HELM is not set (make helm builds helm)")
	}
	return h
}

// objects is what `helm template` rendered, by kind/name.
type objects map[string][]byte

func template(t *testing.T, args ...string) (objects, error) {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", "vmlane", ".", "--namespace", "vmlane-system"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, &templateError{stderr.String()}
	}
	objs := objects{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var meta struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		if meta.Kind != "" {
			objs[meta.Kind+"/"+meta.Metadata.Name] = []byte(doc)
		}
	}
	return objs, nil
}

type templateError struct{ stderr string }

func (e *templateError) Error() string { return e.stderr }

func mustTemplate(t *testing.T, args ...string) objects {
	t.Helper()
	objs, err := template(t, args...)
	if err != nil {
		t.Fatalf("helm template %q: %v", args, err)
	}
	return objs
}

func (o objects) daemonSet(t *testing.T, name string) *appsv1.DaemonSet {
	t.Helper()
	doc, ok := o["DaemonSet/"+name]
	if !ok {
		t.Fatalf("no DaemonSet %s rendered (have %v)", name, o.names())
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(doc, &ds); err != nil {
		t.Fatalf("DaemonSet %s: %v", name, err)
	}
	return &ds
}

func (o objects) names() []string {
	var n []string
	for k := range o {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

func container(ds *appsv1.DaemonSet, name string) corev1.Container {
	for _, c := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	return corev1.Container{}
}

// The defaults: everything manifests/ has, and the Secret of the
// live-migration notices' key, which manifests/ cannot ship (one key for
// every cluster would be no key); the image is the chart's appVersion.
func TestDefaults(t *testing.T) {
	objs := mustTemplate(t)
	want := []string{"ClusterRole/vmlane", "ClusterRoleBinding/vmlane", "DaemonSet/vmlane", "Secret/vmlane-peer", "ServiceAccount/vmlane",
		"ValidatingAdmissionPolicy/vmlane-vmclaims", "ValidatingAdmissionPolicyBinding/vmlane-vmclaims"}
	if got := objs.names(); !slices.Equal(got, want) {
		t.Errorf("objects %v, want %v (no Namespace: Helm installs into one that exists)", got, want)
	}
	var secret corev1.Secret
	if err := yaml.Unmarshal(objs["Secret/vmlane-peer"], &secret); err != nil {
		t.Fatal(err)
	}
	if key := secret.Data["key"]; len(key) < 32 {
		t.Errorf("the peer key %q: want at least 32 bytes", key)
	}
	if again := mustTemplate(t); bytes.Equal(again["Secret/vmlane-peer"], objs["Secret/vmlane-peer"]) {
		t.Error("two renders made the same peer key: it is not random")
	}
	ds := objs.daemonSet(t, "vmlane")
	c := container(ds, "vmlaned")
	wantArgs := []string{"--node-name=$(NODE_NAME)", "--cni-conf-dir=/etc/cni/net.d", "--vm-cni-conf-dir=/etc/cni/vmlane-vm.d",
		"--lease-file=/var/lib/vmlane/leases.json", "--health-addr=127.0.0.1:9465", "--metrics-addr=127.0.0.1:9464"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("vmlaned args %q, want %q", c.Args, wantArgs)
	}
	chart, err := os.ReadFile("Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ AppVersion string }
	yaml.Unmarshal(chart, &meta)
	for _, name := range []string{"install-cni", "vmlaned"} {
		if got := container(ds, name).Image; got != "ghcr.io/vmlane/vmlane:"+meta.AppVersion {
			t.Errorf("%s image %q, want the appVersion's, ghcr.io/vmlane/vmlane:%s", name, got, meta.AppVersion)
		}
	}
	if len(c.Env) != 1 {
		t.Errorf("env %v, want NODE_NAME only (iptablesMode auto)", c.Env)
	}
	if sel := ds.Spec.Template.Spec.NodeSelector; len(sel) != 1 || sel["kubernetes.io/os"] != "linux" {
		t.Errorf("nodeSelector %v", sel)
	}
}

// Each value reaches the flag, volume or field it is for.
func TestValues(t *testing.T) {
	objs := mustTemplate(t,
		"--set", "image.repository=registry.example.com/vmlane,image.tag=v9.9.9,image.digest=sha256:"+strings.Repeat("ab", 32),
		"--set", "clusterCIDRs={10.244.0.0/16,fd00:10:244::/56},serviceCIDRs={10.96.0.0/12}",
		"--set", "dns.servers={10.96.0.10},dns.search={svc.cluster.local,cluster.local},dns.domain=cluster.local",
		"--set", "antiSpoof=false,mtu=1400,vmHoldTime=48h,healthPort=19465,metricsPort=19464,iptablesMode=legacy",
		"--set", "crossSubnet.mode=bgp,crossSubnet.bgp.asn=64513,crossSubnet.bgp.peers={10.0.0.1:64512,[fd00::1]:64512},crossSubnet.bgp.passwordSecret=vmlane-bgp,crossSubnet.bgp.maxPrefixes=50",
		"--set", "extraArgs={--resync-period=1m}",
		"--set", "migration.peerKeySecret=cluster-peer-key,migration.createPeerKey=false,migration.peerPort=19466",
		"--set", "cni.binDir=/var/lib/rancher/k3s/data/current/bin,cni.confDir=/var/lib/rancher/k3s/agent/etc/cni/net.d",
		"--set", "tolerations=null,resources.limits.memory=256Mi")
	ds := objs.daemonSet(t, "vmlane")
	c := container(ds, "vmlaned")
	for _, want := range []string{
		"--cni-conf-dir=/var/lib/rancher/k3s/agent/etc/cni/net.d",
		"--health-addr=127.0.0.1:19465", "--metrics-addr=127.0.0.1:19464",
		"--service-cidr=10.96.0.0/12", "--cluster-cidr=10.244.0.0/16,fd00:10:244::/56",
		"--cross-subnet=bgp", "--bgp-asn=64513", "--bgp-peer=10.0.0.1:64512", "--bgp-peer=[fd00::1]:64512",
		"--bgp-max-prefixes=50", "--bgp-password-file=/etc/vmlane/bgp/password",
		"--anti-spoof=false", "--mtu=1400", "--vm-hold-time=48h",
		"--dns=10.96.0.10", "--search=svc.cluster.local,cluster.local", "--domain=cluster.local",
		"--resync-period=1m", "--peer-port=19466",
	} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("vmlaned args %q lack %s", c.Args, want)
		}
	}
	if want := "registry.example.com/vmlane:v9.9.9@sha256:" + strings.Repeat("ab", 32); c.Image != want {
		t.Errorf("image %q, want %q", c.Image, want)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "VMLANE_IPTABLES_MODE" && e.Value == "legacy" }) {
		t.Errorf("env %v lacks VMLANE_IPTABLES_MODE=legacy", c.Env)
	}
	if p := c.ReadinessProbe.HTTPGet.Port.IntValue(); p != 19465 {
		t.Errorf("readiness probe port %d, want healthPort", p)
	}
	if c.Resources.Limits.Memory().String() != "256Mi" {
		t.Errorf("resources %v", c.Resources)
	}
	if len(ds.Spec.Template.Spec.Tolerations) != 0 {
		t.Errorf("tolerations %v, want none", ds.Spec.Template.Spec.Tolerations)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	if v := vols["bgp-secret"]; v.Secret == nil || v.Secret.SecretName != "vmlane-bgp" {
		t.Errorf("bgp-secret volume %+v", v)
	}
	if v := vols["peer-key"]; v.Secret == nil || v.Secret.SecretName != "cluster-peer-key" || v.Secret.Optional == nil || !*v.Secret.Optional {
		t.Errorf("peer-key volume %+v, want the Secret cluster-peer-key, optional", v)
	}
	// Where vmlaned looks for the key without a flag (peer.DefaultKeyFile).
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "peer-key" && m.MountPath+"/key" == "/etc/vmlane/peer/key"
	}) {
		t.Errorf("the peer key is not mounted at /etc/vmlane/peer/key: %v", c.VolumeMounts)
	}
	if _, ok := objs["Secret/cluster-peer-key"]; ok {
		t.Error("createPeerKey=false made the Secret")
	}
	if v := vols["cni-bin"]; v.HostPath == nil || v.HostPath.Path != "/var/lib/rancher/k3s/data/current/bin" {
		t.Errorf("cni-bin volume %+v", v)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "cni-conf" && m.MountPath == "/var/lib/rancher/k3s/agent/etc/cni/net.d"
	}) {
		t.Errorf("the CNI conf folder is not mounted at its node path: %v", c.VolumeMounts)
	}
}

// hybrid: the full DaemonSet on the VM nodes, routes-only on the others,
// split by the same label.
func TestHybrid(t *testing.T) {
	objs := mustTemplate(t, "--set", "hybrid.enabled=true,hybrid.vmNodeLabel=example.com/vms,serviceCIDRs={10.96.0.0/12}")
	full := objs.daemonSet(t, "vmlane")
	if full.Spec.Template.Spec.NodeSelector["example.com/vms"] != "true" {
		t.Errorf("full mode's nodeSelector %v, want example.com/vms=true", full.Spec.Template.Spec.NodeSelector)
	}
	ro := objs.daemonSet(t, "vmlane-routes")
	c := container(ro, "vmlaned")
	// A node of another CNI takes live-migration notices too: the key
	// where vmlaned looks for it.
	if !slices.ContainsFunc(ro.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "peer-key" && v.Secret != nil && v.Secret.SecretName == "vmlane-peer"
	}) || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "peer-key" && m.MountPath == "/etc/vmlane/peer"
	}) {
		t.Errorf("routes-only: the peer key is not mounted at /etc/vmlane/peer: %v", c.VolumeMounts)
	}
	if !slices.Contains(c.Args, "--routes-only") || !slices.Contains(c.Args, "--service-cidr=10.96.0.0/12") {
		t.Errorf("routes-only args %q", c.Args)
	}
	terms := ro.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || !slices.ContainsFunc(terms[0].MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
		return r.Key == "example.com/vms" && r.Operator == corev1.NodeSelectorOpNotIn && slices.Equal(r.Values, []string{"true"})
	}) {
		t.Errorf("routes-only affinity %+v, want example.com/vms NotIn [true]", terms)
	}
	for _, n := range []string{"ServiceAccount/vmlane-routes", "ClusterRole/vmlane-routes", "ClusterRoleBinding/vmlane-routes"} {
		if _, ok := objs[n]; !ok {
			t.Errorf("no %s", n)
		}
	}
}

// Another namespace: the admission policy and the bindings name
// vmlaned's ServiceAccount there.
func TestNamespace(t *testing.T) {
	cmd := exec.Command(helm(t), "template", "vmlane", ".", "--namespace", "net-system", "--set", "namespace.create=true")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		`request.userInfo.username == "system:serviceaccount:net-system:vmlane"`,
		"kind: Namespace\nmetadata:\n  name: net-system",
		"    namespace: net-system", // the ClusterRoleBinding's subject
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rendered into net-system, no %q", want)
		}
	}
	// vmlane-system only in the comments' examples.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "vmlane-system") && !strings.HasPrefix(strings.TrimSpace(line), "#") {
			t.Errorf("rendered into net-system, still %q", line)
		}
	}
}

// The schema refuses what vmlaned would refuse at start, naming the value
// (as a JSON pointer).
func TestSchemaRefuses(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"crossSubnet.mode=ipip", "/crossSubnet/mode"},
		{"mtu=-1", "/mtu"},
		{"image.digest=abc", "/image/digest"},
		{"image.pullPolicy=Sometimes", "/image/pullPolicy"},
		{"clusterCIDRs={10.0.0.0}", "/clusterCIDRs/0"},
		{"crossSubnet.bgp.peers={10.0.0.1}", "/crossSubnet/bgp/peers/0"},
		{"iptablesMode=both", "/iptablesMode"},
		{"vmHoldTime=2days", "/vmHoldTime"},
		{"migration.peerPort=0", "/migration/peerPort"},
		{"migration.peerKeySecret=Peer_Key", "/migration/peerKeySecret"},
		{"extraArgs={resync}", "/extraArgs/0"},
		{"noSuchValue=1", "noSuchValue"},
	} {
		_, err := template(t, "--set", tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: %v, want a schema error naming %s", tc.set, err, tc.want)
		}
	}
}
