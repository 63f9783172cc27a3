package cluster

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/testvm"
)

// WhoamiScript makes a busybox container serve /cgi-bin/whoami on port 80,
// as the test guests do: the body is the client's address as the server
// saw it, the suite's proof of what NAT did or did not do.
// /cgi-bin/whoserves answers the same and, after a space, the serving
// pod's name: which backend a Service picked.
const WhoamiScript = `mkdir -p /www/cgi-bin
cat >/www/cgi-bin/whoami <<'END'
#!/bin/sh
a=${REMOTE_ADDR#[}
a=${a%]}
printf 'Content-Type: text/plain\r\n\r\n%s\n' "${a#::ffff:}"
END
cat >/www/cgi-bin/whoserves <<'END'
#!/bin/sh
a=${REMOTE_ADDR#[}
a=${a%]}
printf 'Content-Type: text/plain\r\n\r\n%s %s\n' "${a#::ffff:}" "$(hostname)"
END
chmod +x /www/cgi-bin/whoami /www/cgi-bin/whoserves
exec httpd -f -p 80 -h /www`

// Workloads are what the real-node suite and the demo apply: the
// RuntimeClass of VM pods, whose handler containerd maps to the VM
// conflist's folder; two plain pods a node (Deployment web, spread by
// hostname); a ClusterIP Service in front of them.
var Workloads = `apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: ` + VMRuntimeClass + `
handler: ` + VMRuntimeClass + `
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 6
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 1
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: DoNotSchedule
          labelSelector:
            matchLabels: {app: web}
      containers:
        - name: web
          image: vmlane.test/busybox:e2e
          imagePullPolicy: Never
          command: ["/bin/sh", "-c", ` + fmt.Sprintf("%q", WhoamiScript) + `]
          ports: [{containerPort: 80}]
          readinessProbe:
            tcpSocket: {port: 80}
            periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 80}]
`

// macSentinel stands for the VM NIC's MAC in the QEMU command line the
// testvm package renders; the pod's shell puts the real one in.
const macSentinel = "02:00:5e:00:53:01"

// VMGuest is what a VM pod's guest does once it has its addresses, its
// outcomes reported in the pod's log (GuestReport): ping each of Ping
// (three echo requests), then GET each of Fetch (http:// URLs).
//
// VM, when set, makes the pod a pod of that VM the way users do: the pod
// annotation vmlane.io/vm names it, and the pod has no RuntimeClass, so
// containerd attaches it with the plain conflist, which passes the
// annotation to the plugin (the io.kubernetes.cri.pod-annotations
// capability); the plugin attaches it in VM mode all the same.
//
// Migration, when set, is a folder of the host that the pod mounts at the
// same path, where QEMU serves its QMP monitor at Migration/NAME.qmp (see
// QMP). Incoming, with it, starts QEMU waiting for a live migration's
// stream at Migration/NAME.in instead of booting the guest: the target of
// a migration, whose guest is the one the stream brings; the pod is
// annotated vmlane.io/migration-target: MigrationFrom (the source pod), as
// the plugin asks of a second pod of a running VM.
type VMGuest struct {
	Ping          []netip.Addr
	Fetch         []string
	VM            string
	Migration     string
	Incoming      bool
	MigrationFrom string
	// Label, when set, is one more label of the pod (KEY: VALUE), for a
	// Service that selects it alone.
	Label string
	// HostPort, when set, maps that port of the node to the guest's
	// HTTP server (the pod's containerPort 80).
	HostPort int
}

// GuestReport is what VM pod name's guest has reported so far in its log.
func (c *Cluster) GuestReport(name string) (testvm.Result, error) {
	out, err := c.Kubectl("logs", name)
	if err != nil {
		return testvm.Result{}, err
	}
	return testvm.ParseConsole(out), nil
}

// StartVMPod creates a VM pod as a virt-launcher would run one: a pod of the
// vmlane-vm RuntimeClass, so containerd attaches it with the VM conflist
// (a TAP, tap0, joined to the pod's veth), whose container runs QEMU on
// that TAP. The guest's NIC gets the MAC vmlane reserved the address for,
// 02:76 and the four bytes of the pod IP (docs/runtimes.md,
// "For VM runtime authors"); the guest then asks for its address by DHCP, pings the
// targets and stays up. QEMU and its libraries come from the node's /usr
// (read-only), the kernel and initramfs from the guest build; the
// container is privileged for /dev/net/tun, as a virt-launcher gets it
// from a device plugin. The guest's console is the container's log.
func (c *Cluster) StartVMPod(tb testing.TB, name, node string, g VMGuest) KubePod {
	tb.Helper()
	if g.VM != "" {
		c.step("VM pod %s on %s: annotated vmlane.io/vm: %s, QEMU on the pod's TAP", name, node, g.VM)
	} else {
		c.step("VM pod %s on %s: RuntimeClass %s, QEMU on the pod's TAP", name, node, VMRuntimeClass)
	}
	var targets []string
	for _, a := range g.Ping {
		targets = append(targets, a.String())
	}
	cfg := testvm.Config{Tap: "tap0", MAC: macSentinel, Mode: testvm.ModeDHCP, IPv6: c.DualStack(), Hold: true,
		Ping: targets, Fetch: g.Fetch}
	if g.Migration != "" {
		cfg.QMP = filepath.Join(g.Migration, name+".qmp")
		if g.Incoming {
			cfg.Incoming = filepath.Join(g.Migration, name+".in")
		}
	}
	argv, err := c.Guest().Command(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	var q []string
	for _, a := range argv {
		a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		q = append(q, strings.ReplaceAll(a, macSentinel, `'"$mac"'`))
	}
	script := `set -- $(echo "$POD_IP" | tr . ' ')
mac=$(printf '02:76:%02x:%02x:%02x:%02x' "$1" "$2" "$3" "$4")
echo "vm-launcher: pod IP $POD_IP, guest NIC $mac on tap0"
exec ` + strings.Join(q, " ")
	guestDir := filepath.Dir(c.Guest().Kernel)
	meta, class := "", "runtimeClassName: "+VMRuntimeClass
	if g.VM != "" {
		meta, class = "annotations: {vmlane.io/vm: "+g.VM+"}", ""
		if g.MigrationFrom != "" {
			meta = "annotations: {vmlane.io/vm: " + g.VM + ", vmlane.io/migration-target: " + g.MigrationFrom + "}"
		}
	}
	mounts, volumes := "", ""
	if g.Migration != "" {
		mounts = fmt.Sprintf("\n        - {name: migration, mountPath: %s}", g.Migration)
		volumes = fmt.Sprintf("\n    - {name: migration, hostPath: {path: %s, type: Directory}}", g.Migration)
	}
	labels := "app: vm"
	if g.Label != "" {
		labels += ", " + g.Label
	}
	ports := ""
	if g.HostPort != 0 {
		ports = fmt.Sprintf("\n      ports: [{containerPort: 80, hostPort: %d}]", g.HostPort)
	}
	c.Apply(tb, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
  labels: {%s}
  %s
spec:
  %s
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
    - name: vm
      image: vmlane.test/busybox:e2e
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", %q]
      env:
        - name: POD_IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}%s
      securityContext: {privileged: true}
      volumeMounts:
        - {name: usr, mountPath: /usr, readOnly: true}
        - {name: guest, mountPath: %s, readOnly: true}%s
  volumes:
    - {name: usr, hostPath: {path: /usr}}
    - {name: guest, hostPath: {path: %s}}%s
`, name, labels, meta, class, node, script, ports, guestDir, mounts, guestDir, volumes))
	var pod KubePod
	WaitFor(tb, 3*time.Minute, "VM pod "+name+" running with an IP", func() (bool, string) {
		ok, why := c.PodsReady("default", "app=vm", len(c.Pods(tb, "default", "app=vm")))
		for _, p := range c.Pods(tb, "default", "app=vm") {
			if p.Name == name && p.IP.IsValid() {
				pod = p
				return ok, why
			}
		}
		return false, why
	})
	return pod
}

var (
	guestNetRE  = regexp.MustCompile(`VMLANE-NET .* ip=([0-9.]+)/`)
	guestNet6RE = regexp.MustCompile(`VMLANE-NET6 .* ip6=([0-9a-f:]+)/`)
)

// GuestAddr6 is the IPv6 address the guest reported getting by DHCPv6.
func GuestAddr6(log string) (netip.Addr, bool) {
	m := guestNet6RE.FindStringSubmatch(log)
	if m == nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(m[1])
	return a, err == nil
}

// GuestAddr is the address the guest reported getting by DHCP.
func GuestAddr(log string) (netip.Addr, bool) {
	m := guestNetRE.FindStringSubmatch(log)
	if m == nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(m[1])
	return a, err == nil
}

// WaitNetwork waits until the vmlane DaemonSet is ready on every real
// node and every node is Ready: vmlane set each one up.
func (c *Cluster) WaitNetwork(tb testing.TB) {
	tb.Helper()
	c.step("waiting for the vmlane DaemonSet on every node and the nodes Ready")
	WaitFor(tb, 3*time.Minute, fmt.Sprintf("vmlane DaemonSet ready on %d nodes", len(c.RealNodes)), func() (bool, string) {
		return c.PodsReady("vmlane-system", "app.kubernetes.io/name=vmlane", len(c.RealNodes))
	})
	WaitFor(tb, 2*time.Minute, "nodes Ready", c.NodesReady)
}

// DeployWeb applies Workloads and waits for the web pods, two a node; it
// returns them by node.
func (c *Cluster) DeployWeb(tb testing.TB) map[string][]KubePod {
	tb.Helper()
	c.step("RuntimeClass %s, Deployment web (two pods a node), Service web", VMRuntimeClass)
	c.Apply(tb, Workloads)
	n := 2 * len(c.RealNodes)
	WaitFor(tb, 4*time.Minute, "Deployment web ready", func() (bool, string) {
		return c.PodsReady("default", "app=web", n)
	})
	web := map[string][]KubePod{}
	for _, p := range c.Pods(tb, "default", "app=web") {
		web[p.Node] = append(web[p.Node], p)
	}
	return web
}

// WaitGuest waits until VM pod name's guest reports the address it got by
// DHCP, and returns it.
func (c *Cluster) WaitGuest(tb testing.TB, name string) netip.Addr {
	tb.Helper()
	var addr netip.Addr
	WaitFor(tb, 4*time.Minute, name+"'s guest up with its DHCP address", func() (bool, string) {
		out, _ := c.Kubectl("logs", name)
		a, ok := GuestAddr(out)
		addr = a
		if c.DualStack() {
			_, ok6 := GuestAddr6(out)
			ok = ok && ok6
		}
		return ok, out
	})
	return addr
}
