package main

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestPackReadsBack packs a small tree and reads the tarball back as
// containerd would: the tag, one layer whose diff_id the config lists, the
// entrypoint, and every entry with its type, mode and target.
func TestPackReadsBack(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "usr/local/bin"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "usr/local/bin/tool"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "etc-file"), []byte("x"), 0o600))
	must(os.Link(filepath.Join(dir, "usr/local/bin/tool"), filepath.Join(dir, "usr/local/bin/tool2")))
	must(os.Symlink("usr/lib", filepath.Join(dir, "lib")))
	out := filepath.Join(t.TempDir(), "img.tar")
	o := packOptions{Dir: dir, Tag: "example.test/img:v1", Out: out, Entrypoint: []string{"/usr/local/bin/tool"}, Cmd: []string{"serve"}}
	must(pack(o))

	tag, _ := name.NewTag(o.Tag)
	img, err := tarball.ImageFromPath(out, &tag)
	must(err)
	cf, err := img.ConfigFile()
	must(err)
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	if diff := cmp.Diff([]string{"/usr/local/bin/tool"}, cf.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"serve"}, cf.Config.Cmd); diff != "" {
		t.Errorf("cmd (-want +got):\n%s", diff)
	}
	if len(cf.Config.Env) == 0 || cf.Config.Env[0] != defaultPath {
		t.Errorf("env %q, want the default PATH", cf.Config.Env)
	}
	layers, err := img.Layers()
	must(err)
	if len(layers) != 1 || len(cf.RootFS.DiffIDs) != 1 {
		t.Fatalf("%d layers, %d diff_ids; want 1 and 1", len(layers), len(cf.RootFS.DiffIDs))
	}
	if d, _ := layers[0].DiffID(); d != cf.RootFS.DiffIDs[0] {
		t.Errorf("layer diff_id %s, config says %s", d, cf.RootFS.DiffIDs[0])
	}
	rc, err := layers[0].Uncompressed()
	must(err)
	defer rc.Close()
	var got []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(err)
		line := string(h.Typeflag) + " " + h.Name + " " + os.FileMode(h.Mode).Perm().String() + " " + h.Linkname
		if h.ModTime.Unix() != 0 {
			t.Errorf("%s: mtime %v, want the epoch (reproducible layers)", h.Name, h.ModTime)
		}
		got = append(got, line)
	}
	want := []string{
		"0 etc-file -rw------- ",
		"2 lib -rwxrwxrwx usr/lib",
		"5 usr/ -rwxr-xr-x ",
		"5 usr/local/ -rwxr-xr-x ",
		"5 usr/local/bin/ -rwxr-xr-x ",
		"0 usr/local/bin/tool -rwxr-xr-x ",
		"1 usr/local/bin/tool2 -rwxr-xr-x usr/local/bin/tool",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}

	// The same tree packs to the same image.
	out2 := filepath.Join(t.TempDir(), "img.tar")
	o.Out = out2
	must(pack(o))
	img2, err := tarball.ImageFromPath(out2, &tag)
	must(err)
	d1, _ := img.Digest()
	d2, _ := img2.Digest()
	if d1 != d2 {
		t.Errorf("packing the same tree twice gave %s and %s", d1, d2)
	}
}

func TestRunFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tag", "a:b", "-o", "x", "-entrypoint", "/x"}, "-dir is required"},
		{[]string{"-dir", ".", "-o", "x", "-entrypoint", "/x"}, "-tag is required"},
		{[]string{"-dir", ".", "-tag", "a:b", "-entrypoint", "/x"}, "-o is required"},
		{[]string{"-dir", ".", "-tag", "a:b", "-o", "x"}, "-entrypoint is required"},
		{[]string{"-dir", ".", "-tag", "a:b", "-o", "x", "-entrypoint", "/x", "-env", "NOVALUE"}, `invalid -env "NOVALUE"`},
		{[]string{"-dir", ".", "-tag", "UPPER CASE", "-o", filepath.Join(t.TempDir(), "x"), "-entrypoint", "/x"}, `invalid -tag "UPPER CASE"`},
	} {
		err := run(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
