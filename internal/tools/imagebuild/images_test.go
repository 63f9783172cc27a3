package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// image is what readImage read from a tarball.
type image struct {
	config  *v1.ConfigFile
	headers []*tar.Header
	byName  map[string]*tar.Header
	content map[string][]byte // of the files asked for
	digest  v1.Hash
	// machines are the architectures of the layer's ELF files, by name.
	machines map[string]elf.Machine
	// layer is the uncompressed layer, for extract.
	layer v1.Layer
}

// readImage reads the image tagged tag from the tarball at path as
// containerd's import would, and checks what every image of ours must
// have: linux/amd64, one layer whose diff_id the config lists, entries
// with the epoch for their time and no owner names. It keeps the
// contents of the regular files named in want.
func readImage(t *testing.T, path, tag string, want []string) *image {
	t.Helper()
	return readImageFor(t, path, tag, "amd64", want)
}

// readImageFor is readImage of an image for arch (amd64 or arm64).
func readImageFor(t *testing.T, path, tag, arch string, want []string) *image {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &ref)
	if err != nil {
		t.Fatalf("reading %s as %s: %v", path, tag, err)
	}
	out := &image{byName: map[string]*tar.Header{}, content: map[string][]byte{}, machines: map[string]elf.Machine{}}
	if out.config, err = img.ConfigFile(); err != nil {
		t.Fatal(err)
	}
	if out.digest, err = img.Digest(); err != nil {
		t.Fatal(err)
	}
	if cf, p := out.config, platforms[arch]; cf.OS != p.OS || cf.Architecture != p.Architecture || cf.Variant != p.Variant {
		t.Errorf("%s: platform %s/%s/%s, want %s", path, cf.OS, cf.Architecture, cf.Variant, p)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 || len(out.config.RootFS.DiffIDs) != 1 {
		t.Fatalf("%s: %d layers, %d diff_ids; want 1 and 1", path, len(layers), len(out.config.RootFS.DiffIDs))
	}
	out.layer = layers[0]
	if d, err := layers[0].DiffID(); err != nil || d != out.config.RootFS.DiffIDs[0] {
		t.Errorf("%s: layer diff_id %s (%v), config says %s", path, d, err, out.config.RootFS.DiffIDs[0])
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: reading the layer: %v", path, err)
		}
		if h.ModTime.Unix() != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: %s: mtime %v, owner names %q %q; want the epoch and none (reproducible layers)", path, h.Name, h.ModTime, h.Uname, h.Gname)
		}
		out.headers = append(out.headers, h)
		out.byName[h.Name] = h
		if h.Typeflag != tar.TypeReg {
			continue
		}
		var r io.Reader = tr
		if slices.Contains(want, h.Name) {
			if out.content[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
			r = bytes.NewReader(out.content[h.Name])
		}
		// ELF: the magic, then e_machine at offset 18 (both byte orders
		// of ours are little-endian).
		var hdr [20]byte
		if n, _ := io.ReadFull(r, hdr[:]); n == len(hdr) && string(hdr[:4]) == elf.ELFMAG {
			out.machines[h.Name] = elf.Machine(binary.LittleEndian.Uint16(hdr[18:]))
		}
	}
	return out
}

// entry describes the layer entry name as the tests compare it: type,
// mode in octal, "not root's" unless owned by 0:0, link target.
func (img *image) entry(name string) string {
	h := img.byName[name]
	if h == nil {
		return "missing"
	}
	s := fmt.Sprintf("%c %04o", h.Typeflag, h.Mode&0o7777)
	if h.Uid != 0 || h.Gid != 0 {
		s += " not root's"
	}
	if h.Linkname != "" {
		s += " " + h.Linkname
	}
	return s
}

// checkEntries compares the entries named in want with their
// descriptions there (see entry).
func (img *image) checkEntries(t *testing.T, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for name := range want {
		got[name] = img.entry(name)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// checkMachines fails for each ELF file of the image that is not for m,
// and unless there are some.
func (img *image) checkMachines(t *testing.T, m elf.Machine) {
	t.Helper()
	bad := 0
	for name, got := range img.machines {
		if got != m {
			if bad++; bad <= 10 {
				t.Errorf("%s is an ELF file for %s, want %s", name, got, m)
			}
		}
	}
	if len(img.machines) < 10 {
		t.Errorf("only %d ELF files in the image", len(img.machines))
	}
}

// extract unpacks the image's layer into a new folder, with GNU tar.
func (img *image) extract(t *testing.T) string {
	t.Helper()
	rc, err := img.layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	dir := t.TempDir()
	cmd := exec.Command("tar", "-x", "-C", dir)
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, out)
	}
	return dir
}

// under lists the entries below folder d.
func (img *image) under(d string) (names []string) {
	for _, h := range img.headers {
		if strings.HasPrefix(h.Name, d) && h.Name != d {
			names = append(names, h.Name)
		}
	}
	return names
}

// checkStatic fails unless the file name, read by readImage, is a static
// ELF program: one without a program interpreter.
func (img *image) checkStatic(t *testing.T, name string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(img.content[name]))
	if err != nil {
		t.Errorf("%s: not ELF: %v", name, err)
		return
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: not static", name)
		}
	}
}

// TestBuiltImages checks the images `make image` wrote to
// $VMLANE_IMAGE_DIR: the files each must have, their modes and owners,
// and the configs containerd runs them with.
func TestBuiltImages(t *testing.T) {
	dir := os.Getenv("VMLANE_IMAGE_DIR")
	if dir == "" {
		t.Skip("VMLANE_IMAGE_DIR is not set: no images to check (make image builds them into .cache/images)")
	}
	for _, f := range []string{"vmlane.tar", "vmlane-arm64.tar", "pause.tar", "busybox.tar"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Skipf("no %s in %s (make image builds it): %v", f, dir, err)
		}
	}
	t.Run("vmlane", func(t *testing.T) {
		if raceEnabled {
			// Nothing here runs concurrently, and the e2e suites run
			// this image for real.
			t.Skip("reading vmlane.tar under the race detector takes half a minute: go test -run TestBuiltImages ./internal/tools/imagebuild, without -race, checks it")
		}
		checkVmlaneImage(t, filepath.Join(dir, "vmlane.tar"), "amd64")
	})

	t.Run("vmlane-arm64", func(t *testing.T) {
		if raceEnabled {
			t.Skip("reading vmlane-arm64.tar under the race detector takes half a minute: go test -run TestBuiltImages ./internal/tools/imagebuild, without -race, checks it")
		}
		img := checkVmlaneImage(t, filepath.Join(dir, "vmlane-arm64.tar"), "arm64")
		// What of it runs here: under Debian's qemu-aarch64-static,
		// called directly (no binfmt), the image's root as its -L
		// prefix, where the dynamic programs find their loader and
		// libraries. iptables-nft itself cannot run so (qemu-user does
		// not emulate netfilter's netlink sockets: "Failed to initialize
		// nft: Protocol not supported"), so its -save, which does not
		// open one for -V, and the legacy one stand for it.
		qemu := os.Getenv("VMLANE_QEMU_AARCH64")
		if qemu == "" {
			if qemu, _ = exec.LookPath("qemu-aarch64-static"); qemu == "" {
				t.Skip("no qemu-aarch64-static (VMLANE_QEMU_AARCH64; make qemu-user unpacks Debian's): the arm64 programs are not run")
			}
		}
		root := img.extract(t)
		for _, tc := range []struct {
			argv []string
			want string
		}{
			{[]string{"/usr/local/bin/vmlaned", "--version"}, "linux/arm64)"},
			{[]string{"/usr/local/bin/vmlane", "--version"}, "linux/arm64)"},
			{[]string{"/usr/local/bin/vmlanectl", "version"}, "linux/arm64)"},
			{[]string{"/usr/sbin/iptables-legacy", "--version"}, "iptables v1."},
			{[]string{"/usr/sbin/iptables-nft-save", "-V"}, "(nf_tables)"},
			{[]string{"/usr/bin/ip", "-V"}, "iproute2"},
			{[]string{"/usr/bin/update-alternatives", "--version"}, "update-alternatives"},
		} {
			cmd := exec.Command(qemu, append([]string{"-L", root, filepath.Join(root, tc.argv[0])}, tc.argv[1:]...)...)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("qemu-aarch64-static %s: %v\n%s\nwant %q", strings.Join(tc.argv, " "), err, out, tc.want)
				continue
			}
			t.Logf("arm64 %s: %s", strings.Join(tc.argv, " "), strings.TrimSpace(string(out)))
		}
	})

	t.Run("pause", func(t *testing.T) {
		img := readImage(t, filepath.Join(dir, "pause.tar"), pauseTag, []string{"pause"})
		if diff := cmp.Diff([]string{"/pause"}, img.config.Config.Entrypoint); diff != "" {
			t.Errorf("entrypoint (-want +got):\n%s", diff)
		}
		if len(img.headers) != 1 || img.entry("pause") != "0 0755" {
			t.Errorf("entries %q, want only pause, root's, 0755", img.under(""))
		}
		img.checkStatic(t, "pause")
	})

	t.Run("busybox", func(t *testing.T) {
		img := readImage(t, filepath.Join(dir, "busybox.tar"), "vmlane.test/busybox:e2e", []string{"bin/busybox", "etc/passwd", "etc/group"})
		if diff := cmp.Diff([]string{"/bin/sh"}, img.config.Config.Entrypoint); diff != "" {
			t.Errorf("entrypoint (-want +got):\n%s", diff)
		}
		img.checkEntries(t, map[string]string{
			"bin/busybox": "0 0755",
			"bin/sh":      "2 0777 busybox",
			"bin/ip":      "2 0777 busybox",
			"bin/httpd":   "2 0777 busybox",
			"lib":         "2 0777 usr/lib",
			"lib64":       "2 0777 usr/lib64",
			"usr/":        "5 0755",
			"tmp/":        "5 1777",
			"etc/passwd":  "0 0644",
			"etc/group":   "0 0644",
		})
		if names := img.under("usr/"); len(names) > 0 {
			t.Errorf("usr/ is not empty (the pod mounts the node's /usr there): %q", names)
		}
		img.checkStatic(t, "bin/busybox")
		if !bytes.HasPrefix(img.content["etc/passwd"], []byte("root:x:0:0:")) || !bytes.HasPrefix(img.content["etc/group"], []byte("root:x:0:")) {
			t.Errorf("/etc/passwd %q, /etc/group %q: want root in both", img.content["etc/passwd"], img.content["etc/group"])
		}
	})
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// checkVmlaneImage reads vmlane's image for arch from path and checks
// what it must have on every architecture: its config, the entries
// (vmlaneEntries), ELF files all for arch, static binaries of ours, and
// no more than a slim Debian root.
func checkVmlaneImage(t *testing.T, path, arch string) *image {
	t.Helper()
	tag := "ghcr.io/vmlane/vmlane:" + envOr("VMLANE_IMAGE_TAG", "e2e")
	bins := []string{"usr/local/bin/vmlane", "usr/local/bin/vmlaned", "usr/local/bin/vmlanectl", "usr/local/bin/portmap"}
	img := readImageFor(t, path, tag, arch, bins)
	if diff := cmp.Diff(v1.Config{
		Entrypoint: []string{"/usr/local/bin/vmlane-entrypoint"},
		Cmd:        []string{"vmlaned"},
		Env:        []string{defaultPath},
	}, img.config.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	img.checkEntries(t, vmlaneEntries)
	// Every ELF file is for the image's architecture: the packages' and
	// ours.
	img.checkMachines(t, map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch])
	for _, b := range bins {
		img.checkStatic(t, b)
	}
	checkSlim(t, img)
	return img
}

// vmlaneEntries are entries vmlane's image has, on every architecture
// (see image.entry).
var vmlaneEntries = map[string]string{
	"usr/local/bin/vmlane":            "0 0755",
	"usr/local/bin/vmlaned":           "0 0755",
	"usr/local/bin/vmlanectl":         "0 0755",
	"usr/local/bin/portmap":           "0 0755",
	"usr/local/bin/vmlane-entrypoint": "0 0755",
	// What the entrypoint and vmlaned run.
	"usr/sbin/iptables-nft":              "2 0777 xtables-nft-multi",
	"usr/sbin/iptables-legacy":           "2 0777 xtables-legacy-multi",
	"usr/sbin/xtables-nft-multi":         "0 0755",
	"usr/bin/update-alternatives":        "0 0755",
	"etc/alternatives/iptables":          "2 0777 /usr/sbin/iptables-nft",
	"var/lib/dpkg/alternatives/":         "5 0755",
	"var/lib/dpkg/alternatives/iptables": "0 0644",
	"usr/bin/ip":                         "0 0755",
	"etc/passwd":                         "0 0644",
	"etc/group":                          "0 0644",
	"bin":                                "2 0777 usr/bin",
	"bin/sh":                             "missing", // under the /bin symlink: usr/bin/sh
	"usr/bin/sh":                         "2 0777 dash",
	"proc/":                              "5 0755",
	"sys/":                               "5 0755",
	"dev/":                               "5 0755",
	"tmp/":                               "5 1777",
}

// checkSlim fails for what a slim image leaves out: the contents of the
// folders the runtime mounts over, apt's lists and caches, and
// documentation but the copyright files.
func checkSlim(t *testing.T, img *image) {
	t.Helper()
	for _, d := range []string{"proc/", "sys/", "dev/", "var/lib/apt/lists/", "var/cache/apt/archives/partial/"} {
		if names := img.under(d); len(names) > 0 {
			t.Errorf("%s is not empty: %q", d, names)
		}
	}
	for _, n := range img.under("usr/share/doc/") {
		if h := img.byName[n]; h.Typeflag != tar.TypeDir && filepath.Base(n) != "copyright" {
			t.Errorf("%s: documentation other than copyright files (the image is slim as debian:12-slim)", n)
			break
		}
	}
}
