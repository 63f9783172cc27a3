package cluster

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// The cluster DNS every real-node cluster runs, as users' clusters do:
// CoreDNS (internal/testing/realnode/build-coredns.sh) as the Deployment
// coredns and the Service kube-dns at ClusterDNS, which the kubelets give
// pods (clusterDNS, clusterDomain) and the overlay gives vmlaned, whose DHCP
// servers hand it to guests.
const (
	ClusterDNS    = "10.96.0.10"
	ClusterDomain = "cluster.local"
)

// ClusterDNSSearch is the search list a pod in namespace default gets.
var ClusterDNSSearch = []string{"default.svc." + ClusterDomain, "svc." + ClusterDomain, ClusterDomain}

// coreDNSImage is the image build-coredns.sh packs in dir (CACHE/VERSION).
func coreDNSImage(dir string) string { return "vmlane.test/coredns:" + filepath.Base(dir) }

// coreDNSManifest is kubeadm's CoreDNS, trimmed: no forward plugin (the
// test network has no upstream resolver; a name outside the cluster gets
// SERVFAIL), one replica, the image imported into every node.
func coreDNSManifest(image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health {
            lameduck 5s
        }
        ready
        kubernetes %[2]s in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        prometheus :9153
        cache 30
        loop
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 1
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      terminationGracePeriodSeconds: 1
      containers:
        - name: coredns
          image: %[1]s
          imagePullPolicy: Never
          args: ["-conf", "/etc/coredns/Corefile"]
          ports:
            - {containerPort: 53, name: dns, protocol: UDP}
            - {containerPort: 53, name: dns-tcp, protocol: TCP}
            - {containerPort: 9153, name: metrics, protocol: TCP}
          readinessProbe:
            httpGet: {path: /ready, port: 8181}
            periodSeconds: 2
          livenessProbe:
            httpGet: {path: /health, port: 8080}
          volumeMounts:
            - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
        - name: config
          configMap:
            name: coredns
            items: [{key: Corefile, path: Corefile}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: %[3]s
  ports:
    - {name: dns, port: 53, protocol: UDP}
    - {name: dns-tcp, port: 53, protocol: TCP}
    - {name: metrics, port: 9153, protocol: TCP}
`, image, ClusterDomain, ClusterDNS)
}

// deployCoreDNS applies the cluster DNS from Options.CoreDNSDir.
func (c *Cluster) deployCoreDNS(tb testing.TB) {
	tb.Helper()
	image := coreDNSImage(c.Opts.CoreDNSDir)
	c.step("cluster DNS: CoreDNS (%s), Service kube-system/kube-dns at %s", image, ClusterDNS)
	c.Apply(tb, coreDNSManifest(image))
}

// WaitClusterDNS waits for CoreDNS to be ready.
func (c *Cluster) WaitClusterDNS(tb testing.TB) {
	tb.Helper()
	WaitFor(tb, 3*time.Minute, "CoreDNS ready", func() (bool, string) {
		return c.PodsReady("kube-system", "k8s-app=kube-dns", 1)
	})
}
