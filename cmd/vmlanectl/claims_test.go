package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vmlane/vmlane/leases"
	"github.com/vmlane/vmlane/plugin"
)

func TestClaims(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.json")
	s := openStore(t, path)
	vm := func(id, name string) leases.ReserveRequest {
		return leases.ReserveRequest{
			Key: leases.Key{ContainerID: id, IfName: "eth0"}, VM: true, VMName: name, MACFor: plugin.DeriveMAC,
			Pod: leases.Pod{Namespace: "default", Name: "virt-launcher-" + id},
		}
	}
	for _, r := range []leases.ReserveRequest{vm("a", "default/web"), vm("b", "default/db"), {Key: leases.Key{ContainerID: "c", IfName: "eth0"}}} {
		if _, err := s.Reserve(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Release(leases.Key{ContainerID: "b", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	r := runAt("claims", "list", "--lease-file", path)
	want := `VM           IP          IP6  MAC                STATE     POD                      HELD UNTIL
default/web  10.244.3.2  -    02:76:0a:f4:03:02  attached  default/virt-launcher-a  -
default/db   10.244.3.3  -    02:76:0a:f4:03:03  held      default/virt-launcher-b  2026-01-03T03:04:05Z
`
	if r.code != 0 || r.stdout != want {
		t.Fatalf("claims list: %d %s\n%s", r.code, r.stderr, cmp.Diff(want, r.stdout))
	}
	r = runAt("claims", "release", "default/web", "--lease-file", path)
	if r.code != exitFail || !strings.Contains(r.stderr, "default/web is attached") {
		t.Errorf("releasing an attached VM: %d %q", r.code, r.stderr)
	}
	r = runAt("claims", "release", "default/db", "--lease-file", path)
	if r.code != 0 || r.stdout != "released VM default/db: 10.244.3.3 02:76:0a:f4:03:03\n" {
		t.Errorf("release: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runAt("claims", "release", "default/db", "--lease-file", path)
	if r.code != exitFail || !strings.Contains(r.stderr, "VM default/db holds no address") {
		t.Errorf("second release: %d %q", r.code, r.stderr)
	}
	for _, bad := range [][]string{{"claims", "release", "Default/db"}, {"claims", "release", "db"}, {"claims", "release"}, {"claims", "drop"}} {
		if r := runAt(append(bad, "--lease-file", path)...); r.code != exitUsage {
			t.Errorf("%q: exit %d, want %d: %s", bad, r.code, exitUsage, r.stderr)
		}
	}
	r = runAt("claims", "list", "-o", "json", "--lease-file", path)
	if r.code != 0 || !strings.Contains(r.stdout, `"vmName": "default/web"`) {
		t.Errorf("claims list -o json: %d %s", r.code, r.stdout)
	}
}
