package plugin_test

// The rig of the privileged tests: a "node" netns with a lease file, and
// the built vmlane binary run through libcni as a runtime runs it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
	"github.com/vmlane/vmlane/leases"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// pluginDir returns a folder holding the vmlane binary: VMLANE_BIN_DIR
// (make test builds it there), or a fresh build.
func pluginDir(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if d := os.Getenv("VMLANE_BIN_DIR"); d != "" {
			if _, err := os.Stat(filepath.Join(d, "vmlane")); err == nil {
				binDir = d
				return
			}
		}
		binDir, buildErr = os.MkdirTemp("", "vmlane-bin-")
		if buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", binDir, "github.com/vmlane/vmlane/cmd/vmlane").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building vmlane: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// node is a test node: a netns that holds the bridge, and a lease file.
type node struct {
	t      *testing.T
	ns     *netnstest.NS
	cni    *libcni.CNIConfig
	leases string
	subnet string
}

func newNode(t *testing.T, subnet string) *node {
	t.Helper()
	privtest.Require(t, "ip", "tc")
	dir := t.TempDir()
	return &node{
		t:  t,
		ns: netnstest.New(t, "node"),
		// An explicit executor: libcni makes its default one lazily,
		// without a lock, which races when goroutines share the config.
		cni: libcni.NewCNIConfigWithCacheDir([]string{pluginDir(t)}, filepath.Join(dir, "cache"),
			&invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}),
		leases: filepath.Join(dir, "leases.json"),
		subnet: subnet,
	}
}

// conf is the vmlane network config; extra fields override or add.
func (n *node) conf(version string, vm bool, extra map[string]any) *libcni.NetworkConfigList {
	n.t.Helper()
	p := map[string]any{
		"type":         "vmlane",
		"subnet":       n.subnet,
		"leaseFile":    n.leases,
		"vm":           vm,
		"dns":          map[string]any{"nameservers": []string{"10.96.0.10"}, "search": []string{"default.svc.cluster.local"}},
		"capabilities": map[string]bool{"mac": true, "ips": true},
	}
	for k, v := range extra {
		p[k] = v
	}
	raw, _ := json.Marshal(map[string]any{"cniVersion": version, "name": "vmlane-test", "plugins": []any{p}})
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		n.t.Fatalf("parsing conflist: %v", err)
	}
	return list
}

func podRT(id string, pod *netnstest.NS) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       pod.Path,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", "pod-" + id},
			{"K8S_POD_UID", "uid-" + id},
		},
	}
}

// in runs fn with the calling thread in the node netns, so the plugin that
// libcni executes runs there too.
func (n *node) in(fn func() error) error { return n.ns.Do(fn) }

func (n *node) add(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (*current.Result, error) {
	var res types.Result
	err := n.in(func() (err error) {
		res, err = n.cni.AddNetworkList(context.Background(), list, rt)
		return err
	})
	if err != nil {
		return nil, err
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		n.t.Fatalf("converting result: %v", err)
	}
	return r, nil
}

func (n *node) del(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return n.in(func() error { return n.cni.DelNetworkList(context.Background(), list, rt) })
}

func (n *node) check(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return n.in(func() error { return n.cni.CheckNetworkList(context.Background(), list, rt) })
}

func (n *node) status(list *libcni.NetworkConfigList) error {
	return n.in(func() error { return n.cni.GetStatusNetworkList(context.Background(), list) })
}

func (n *node) gc(list *libcni.NetworkConfigList, valid ...*libcni.RuntimeConf) error {
	args := &libcni.GCArgs{}
	for _, rt := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: rt.ContainerID, IfName: rt.IfName})
	}
	return n.in(func() error { return n.cni.GCNetworkList(context.Background(), list, args) })
}

func (n *node) leaseList() []leases.Lease {
	n.t.Helper()
	s, err := leases.Read(n.leases)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		n.t.Fatal(err)
	}
	return s.Leases()
}

// hostVeths lists the vmlane host veths in the node netns.
func (n *node) hostVeths() []string {
	n.t.Helper()
	out := n.ns.MustRun(n.t, "ip", "-o", "link", "show")
	var names []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]
		if len(name) == 14 && strings.HasPrefix(name, "vml") {
			names = append(names, name)
		}
	}
	return names
}

// assertClean checks nothing is left of any attachment.
func (n *node) assertClean(pods ...*netnstest.NS) {
	n.t.Helper()
	if ls := n.leaseList(); len(ls) != 0 {
		n.t.Errorf("leases left: %+v", ls)
	}
	if v := n.hostVeths(); len(v) != 0 {
		n.t.Errorf("host veths left: %v", v)
	}
	for _, p := range pods {
		out := p.MustRun(n.t, "ip", "-o", "link", "show")
		if strings.Count(out, "\n") != 1 { // lo only
			n.t.Errorf("links left in %s:\n%s", p.Name, out)
		}
	}
}

func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}
