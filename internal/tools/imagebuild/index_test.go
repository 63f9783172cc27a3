package main

import (
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// packArch packs a one-file root for arch and returns the tarball.
func packArch(t *testing.T, dir, arch string) string {
	t.Helper()
	root := filepath.Join(dir, "root-"+arch)
	os.MkdirAll(root, 0o755)
	os.Chmod(root, 0o755)
	tree(t, root, []string{"prog:0755"})
	out := filepath.Join(dir, arch+".tar")
	if err := run([]string{"pack", "-dir", root, "-tag", "ghcr.io/vmlane/vmlane:e2e", "-entrypoint", "/prog", "-arch", arch, "-o", out}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	return out
}

// index writes the tarballs' OCI layout and per-platform tarballs under
// dir and returns the digest it printed.
func index(t *testing.T, dir string, tars ...string) string {
	t.Helper()
	var stdout bytes.Buffer
	args := append([]string{"index", "-tag", "ghcr.io/vmlane/vmlane:v0.4.0", "-oci", filepath.Join(dir, "oci"), "-tar", filepath.Join(dir, "vmlane-v0.4.0")}, tars...)
	if err := run(args, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(stdout.String())
}

func TestIndex(t *testing.T) {
	dir := t.TempDir()
	// arm64 first: the index is sorted whatever the order given.
	tars := []string{packArch(t, dir, "arm64"), packArch(t, dir, "amd64")}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.MkdirAll(a, 0o755)
	os.MkdirAll(b, 0o755)
	first := index(t, a, tars...)
	if second := index(t, b, tars[1], tars[0]); second != first {
		t.Fatalf("the same images gave index %s, then %s: not reproducible", first, second)
	}

	p, err := layout.FromPath(filepath.Join(a, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Digest.String() != first ||
		tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v0.4.0" || tm.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("the layout's index.json: %+v; want the one index %s named v0.4.0", tm.Manifests, first)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Fatalf("the index does not validate: %v", err)
	}
	im, _ := idx.IndexManifest()
	var plats []string
	for _, m := range im.Manifests {
		plats = append(plats, m.Platform.String())
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		mf, _ := img.Manifest()
		if mf.MediaType != types.OCIManifestSchema1 || mf.Config.MediaType != types.OCIConfigJSON || mf.Layers[0].MediaType != types.OCILayer {
			t.Errorf("%s: media types %s, %s, %s; want OCI's", m.Platform, mf.MediaType, mf.Config.MediaType, mf.Layers[0].MediaType)
		}
		cf, _ := img.ConfigFile()
		if cf.Architecture != m.Platform.Architecture || cf.Variant != m.Platform.Variant {
			t.Errorf("%s: the config says %s/%s", m.Platform, cf.Architecture, cf.Variant)
		}
		// The per-platform tarball holds the same image (its config,
		// the same layer) under the release's tag.
		tb := filepath.Join(a, "vmlane-v0.4.0-linux-"+m.Platform.Architecture+".tar")
		tag, _ := name.NewTag("ghcr.io/vmlane/vmlane:v0.4.0")
		timg, err := tarball.ImageFromPath(tb, &tag)
		if err != nil {
			t.Fatalf("%s: %v", tb, err)
		}
		if got, want := configName(t, timg), configName(t, img); got != want {
			t.Errorf("%s: config %s, want the index's %s", tb, got, want)
		}
	}
	if got := strings.Join(plats, " "); got != "linux/amd64 linux/arm64/v8" {
		t.Errorf("platforms %s, want linux/amd64 linux/arm64/v8", got)
	}

	// Two images of one platform are refused.
	err = run([]string{"index", "-tag", "a:b", "-oci", filepath.Join(dir, "c"), tars[0], tars[0]}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "are both linux/arm64 images") {
		t.Errorf("two arm64 images: %v", err)
	}
}

func configName(t *testing.T, img v1.Image) string {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// push sends the layout's index to a registry (go-containerregistry's
// in-memory one here), where it reads back with the same digest and both
// platforms.
func TestPush(t *testing.T) {
	dir := t.TempDir()
	d := index(t, dir, packArch(t, dir, "amd64"), packArch(t, dir, "arm64"))
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	to := strings.TrimPrefix(srv.URL, "http://") + "/vmlane/vmlane:v0.4.0"
	var stdout bytes.Buffer
	if err := run([]string{"push", "-oci", filepath.Join(dir, "oci"), "-to", to, "-insecure"}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSuffix(to, ":v0.4.0") + ":v0.4.0@" + d + "\n"; stdout.String() != want {
		t.Errorf("push printed %q, want %q", stdout.String(), want)
	}
	ref, _ := name.NewTag(to, name.Insecure)
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := idx.Digest(); got.String() != d {
		t.Errorf("the registry has %s, want %s", got, d)
	}
	if err := validate.Index(idx); err != nil {
		t.Errorf("the pushed index does not validate: %v", err)
	}
	if err := run([]string{"push", "-oci", dir, "-to", to, "-insecure"}, io.Discard, io.Discard); err == nil {
		t.Error("pushing a folder that is no OCI layout succeeded")
	}
}
