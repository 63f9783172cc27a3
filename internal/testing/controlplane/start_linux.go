package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// Start runs etcd and kube-apiserver in a new network namespace and waits
// until the apiserver's /readyz passes. It skips t (or fails it, under
// VMLANE_PRIVILEGED=require) when not root, without ip(8), or when the
// binaries are not built; it fails t when the control plane does not come
// up, logging the tails of the servers' logs. Everything it starts is
// stopped, and the namespace deleted, when t ends.
func Start(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	privtest.Require(t, "ip")
	bins, err := Find()
	if err != nil {
		privtest.Missing(t, err.Error())
	}
	if err := opts.validate(); err != nil {
		t.Fatalf("controlplane.Start: %v", err)
	}
	began := time.Now()

	// The namespace and TempDir before the Cleanup below, so that
	// (cleanups run last first) the servers are stopped before their data
	// and logs are removed and their namespace deleted. netnstest also
	// sweeps namespaces a killed test binary left.
	netns := netnstest.New(t, "cp")
	name := netns.Name
	dir := t.TempDir()
	n := seq.Add(1)
	cp := &ControlPlane{
		NetNS:   name,
		LogDir:  dir,
		t:       t,
		bins:    bins,
		dir:     dir,
		nsPath:  netns.Path,
		host:    netip.MustParseAddr("127.0.0.1"),
		args:    opts.APIServerArgs,
		timeout: opts.StartTimeout,

		clusterCIDR:  opts.ClusterCIDR,
		clusterCIDR6: opts.ClusterCIDR6,
	}
	if cp.timeout == 0 {
		cp.timeout = DefaultStartTimeout
	}
	t.Cleanup(cp.cleanup)

	var ips []netip.Addr
	if opts.SwitchNS != "" {
		if err := addSwitchLink(name, n, opts.Addr, opts.SwitchNS, opts.SwitchBridge); err != nil {
			t.Fatalf("controlplane: %v", err)
		}
		cp.host = opts.Addr.Addr()
		ips = append(ips, cp.host)
	}
	cp.URL = "https://" + netip.AddrPortFrom(cp.host, APIServerPort).String()

	p, err := writePKI(dir, ips)
	if err != nil {
		t.Fatalf("controlplane: writing certificates and keys: %v", err)
	}
	cp.Token, cp.CACert = p.Token, p.CACert
	cp.Kubeconfig = filepath.Join(dir, kubeconfigFile)
	if err := os.WriteFile(cp.Kubeconfig, kubeconfig(cp.URL, cp.CACert, cp.Token), 0o600); err != nil {
		t.Fatalf("controlplane: %v", err)
	}

	if err := cp.startEtcd(); err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	etcdUp := time.Now()
	if err := cp.startAPIServer(); err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	if cp.clusterCIDR.IsValid() {
		if err := cp.startControllers(); err != nil {
			t.Fatalf("controlplane: %v", err)
		}
	}
	t.Logf("controlplane: %s up at %s in %v (etcd %v, kube-apiserver %v); logs in %s",
		name, cp.URL, time.Since(began).Round(time.Millisecond), etcdUp.Sub(began).Round(time.Millisecond),
		time.Since(etcdUp).Round(time.Millisecond), dir)
	return cp
}

// cleanup stops both servers (netnstest deletes the namespace). When the test
// failed (also when Start failed) it first logs the tails of their logs,
// where the reason usually is.
func (cp *ControlPlane) cleanup() {
	if cp.t.Failed() {
		for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			if _, err := os.Stat(filepath.Join(cp.dir, name+".log")); err != nil {
				continue
			}
			cp.t.Logf("controlplane: tail of %s.log:\n%s", name, Tail(filepath.Join(cp.dir, name+".log"), 40))
		}
	}
	cp.Stop()
}

// Stop stops the apiserver, then etcd. It is safe to call more than once;
// the test's cleanup calls it too.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, p := range cp.controllers {
		p.stop()
	}
	cp.controllers = nil
	cp.apiserver.stop()
	cp.apiserver = nil
	cp.etcd.stop()
	cp.etcd = nil
}

// startControllers starts kube-controller-manager and kube-scheduler with
// the admin kubeconfig, and waits for each one's /healthz.
func (cp *ControlPlane) startControllers() error {
	f := func(name string) string { return filepath.Join(cp.dir, name) }
	kubeconfig := f(kubeconfigFile)
	common := []string{
		"--kubeconfig=" + kubeconfig,
		// Delegated authentication and authorization of their own
		// /healthz and /metrics, through the apiserver; without these
		// they warn and deny every request but /healthz.
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
	}
	kcm := append([]string{
		"--secure-port=" + strconv.Itoa(controllerManagerPort),
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + cp.clusterCIDRs(),
		"--node-cidr-mask-size-ipv4=24",
		"--service-cluster-ip-range=" + ServiceCIDR,
		// Publishes kube-root-ca.crt into every namespace, which every
		// pod's projected ServiceAccount volume reads: without it pods
		// never leave ContainerCreating.
		"--root-ca-file=" + f(caCertFile),
		"--service-account-private-key-file=" + f(saKeyFile),
		"--cert-dir=" + f("kcm-certs"),
	}, common...)
	if cp.clusterCIDR6.IsValid() {
		// Refused on a single-stack cluster ("usage of
		// --node-cidr-mask-size-ipv6 is not allowed with single-stack
		// clusters").
		kcm = append(kcm, "--node-cidr-mask-size-ipv6=64")
	}
	sched := append([]string{
		"--secure-port=" + strconv.Itoa(schedulerPort),
		"--cert-dir=" + f("scheduler-certs"),
	}, common...)
	for _, c := range []struct {
		name, bin string
		args      []string
		port      int
	}{
		{"kube-controller-manager", cp.bins.ControllerManager, kcm, controllerManagerPort},
		{"kube-scheduler", cp.bins.Scheduler, sched, schedulerPort},
	} {
		p, err := cp.startProc(c.name, c.bin, c.args)
		if err != nil {
			return err
		}
		cp.mu.Lock()
		cp.controllers = append(cp.controllers, p)
		cp.mu.Unlock()
		hc := &http.Client{Transport: &http.Transport{
			DialContext: cp.Dial,
			// Their serving certificates are self-signed (--cert-dir).
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		}}
		err = cp.waitReady(p, hc, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.port), "")
		hc.CloseIdleConnections()
		if err != nil {
			return err
		}
	}
	return nil
}

// StopAPIServer stops the apiserver (SIGTERM, as a rolling update would)
// and leaves etcd running, for tests of clients riding out an outage.
func (cp *ControlPlane) StopAPIServer() {
	cp.t.Helper()
	began := time.Now()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.apiserver == nil {
		return
	}
	cp.apiserver.stop()
	cp.apiserver = nil
	cp.t.Logf("controlplane: kube-apiserver stopped in %v", time.Since(began).Round(time.Millisecond))
}

// StartAPIServer starts a stopped apiserver again, with the same flags,
// certificates and token, on the same address, and waits for /readyz. It
// fails the test if it does not come up; call it from the test goroutine.
func (cp *ControlPlane) StartAPIServer() {
	cp.t.Helper()
	began := time.Now()
	if err := cp.startAPIServer(); err != nil {
		cp.t.Fatalf("controlplane: %v", err)
	}
	cp.t.Logf("controlplane: kube-apiserver ready again in %v", time.Since(began).Round(time.Millisecond))
}

// Restart stops and starts the apiserver, keeping etcd and its data: what
// clients see when the apiserver is upgraded or its pod restarted.
func (cp *ControlPlane) Restart() {
	cp.t.Helper()
	cp.StopAPIServer()
	cp.StartAPIServer()
}

func (cp *ControlPlane) startEtcd() error {
	peer := "http://127.0.0.1:" + strconv.Itoa(etcdPeerPort)
	client := "http://127.0.0.1:" + strconv.Itoa(etcdClientPort)
	args := []string{
		"--name=vmlcp",
		"--data-dir=" + filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=vmlcp=" + peer,
		// Test data: losing it in a host crash costs nothing, and fsync
		// on every write is most of etcd's latency on a busy disk.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
	p, err := cp.startProc("etcd", cp.bins.Etcd, args)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.etcd = p
	cp.mu.Unlock()
	hc := &http.Client{Transport: &http.Transport{DialContext: cp.Dial}}
	defer hc.CloseIdleConnections()
	return cp.waitReady(p, hc, client+"/health", "")
}

// apiserverArgs are kube-apiserver's flags: the fewest that make a secure,
// authenticating apiserver that a node-like client can use.
func (cp *ControlPlane) apiserverArgs() []string {
	f := func(name string) string { return filepath.Join(cp.dir, name) }
	host := cp.host.String()
	// The kubernetes service's endpoint is the advertise address, and an
	// endpoint may not be a loopback address (fatal since v1.37: "cannot
	// use public IP 127.0.0.1 with endpoint reconciler"). On loopback only,
	// there is no endpoint worth publishing.
	reconciler := "lease"
	if cp.host.IsLoopback() {
		reconciler = "none"
	}
	return append([]string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(etcdClientPort),
		"--bind-address=" + host,
		// Given, because without it the apiserver looks for the default
		// route's interface, and the namespace has no default route.
		"--advertise-address=" + host,
		"--secure-port=" + strconv.Itoa(APIServerPort),
		"--tls-cert-file=" + f(servingCert),
		"--tls-private-key-file=" + f(servingKey),
		"--token-auth-file=" + f(tokenFile),
		"--authorization-mode=RBAC",
		// As kubeadm and every managed cluster set it: node agents (CNI
		// DaemonSets among them) need a privileged container or two.
		"--allow-privileged=true",
		// kubectl logs and exec reach kubelets at the Node's InternalIP,
		// not at its hostname, which nothing here resolves.
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + f(saPubFile),
		"--service-account-signing-key-file=" + f(saKeyFile),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--endpoint-reconciler-type=" + reconciler,
		// It would write a self-signed pair here if the TLS flags above
		// were missing; keep that inside the test's directory too.
		"--cert-dir=" + f("certs"),
	}, cp.args...)
}

func (cp *ControlPlane) startAPIServer() error {
	cp.mu.Lock()
	running, etcd := cp.apiserver != nil, cp.etcd != nil
	cp.mu.Unlock()
	switch {
	case running:
		return errors.New("kube-apiserver is already running")
	case !etcd:
		return errors.New("etcd is stopped (Stop stops both; StopAPIServer only the apiserver)")
	}
	p, err := cp.startProc("kube-apiserver", cp.bins.APIServer, cp.apiserverArgs())
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.apiserver = p
	cp.mu.Unlock()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.CACert)
	hc := &http.Client{Transport: &http.Transport{
		DialContext:     cp.Dial,
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
	defer hc.CloseIdleConnections()
	return cp.waitReady(p, hc, cp.URL+"/readyz", cp.Token)
}

// waitReady polls url until it answers 200, p exits, or cp.timeout passes.
func (cp *ControlPlane) waitReady(p *proc, hc *http.Client, url, token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cp.timeout)
	defer cancel()
	var last string
	for {
		last = probe(ctx, hc, url, token)
		if last == "" {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited while starting: %v (log: %s)", p.name, p.err, p.logPath)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v (%s: %s; log: %s)", p.name, cp.timeout, url, last, p.logPath)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// probe returns "" when url answers 200, and otherwise what it answered.
func probe(ctx context.Context, hc *http.Client, url, token string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	return fmt.Sprintf("%s: %s", resp.Status, body)
}

// startProc starts bin in the control plane's namespace, appending its
// output to LogDir/name.log.
func (cp *ControlPlane) startProc(name, bin string, args []string) (*proc, error) {
	logPath := filepath.Join(cp.dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	fmt.Fprintf(logf, "=== %s %s %q\n", time.Now().Format(time.RFC3339Nano), bin, args)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = cp.dir
	// If the test binary dies (a go test -timeout panic, say), take the
	// servers with it. Pdeathsig follows the forking thread, not the
	// process (golang/go#27505); inNetNS returns its thread to the runtime,
	// which keeps it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := inNetNS(cp.nsPath, cmd.Start); err != nil {
		return nil, fmt.Errorf("starting %s in %s: %w", name, cp.NetNS, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// clusterCIDRs is kube-controller-manager's --cluster-cidr: IPv4, then
// IPv6 on a dual-stack cluster.
func (cp *ControlPlane) clusterCIDRs() string {
	if cp.clusterCIDR6.IsValid() {
		return cp.clusterCIDR.String() + "," + cp.clusterCIDR6.String()
	}
	return cp.clusterCIDR.String()
}
