package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// packOptions say what to pack and how the image runs.
type packOptions struct {
	Dir, Tag, Out string
	// MoreTags are more references to the same image (the e2e test
	// images one root serves under several names).
	MoreTags        []string
	Entrypoint, Cmd []string
	Env             []string
	// Arch is the image's architecture, amd64 (the default) or arm64:
	// what its binaries are built for.
	Arch string
}

// platforms are the image platforms imagebuild packs, by GOARCH: their
// OCI names (arm64 images carry the variant v8, as Docker's and the
// registries' official images do).
var platforms = map[string]v1.Platform{
	"amd64": {OS: "linux", Architecture: "amd64"},
	"arm64": {OS: "linux", Architecture: "arm64", Variant: "v8"},
}

// defaultPath is the image's PATH unless -env sets one.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// pack writes o.Dir as a one-layer linux/o.Arch image tagged o.Tag to
// o.Out, through a temporary file renamed into place.
func pack(o packOptions) error {
	tag, err := name.NewTag(o.Tag)
	if err != nil {
		return fmt.Errorf("invalid -tag %q: %w", o.Tag, err)
	}
	layerPath := o.Out + ".layer"
	defer os.Remove(layerPath)
	if err := writeLayer(o.Dir, layerPath); err != nil {
		return fmt.Errorf("packing %s: %w", o.Dir, err)
	}
	// The layer goes to disk uncompressed, and go-containerregistry
	// gzips it: once for its digest, which the manifest needs first, and
	// again to write it, unless the first result is kept. Kept (in
	// memory, the size of the compressed layer), packing vmlane's image
	// takes a third less time.
	layer, err := tarball.LayerFromFile(layerPath, tarball.WithCompressedCaching)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	// The config from AppendLayers already lists the layer's diff_id;
	// a config made from scratch would not, and ctr rejects an image
	// whose layers and diff_ids disagree.
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	arch := o.Arch
	if arch == "" {
		arch = "amd64"
	}
	plat, ok := platforms[arch]
	if !ok {
		return fmt.Errorf("invalid -arch %q: want amd64 or arm64", o.Arch)
	}
	cf.Architecture, cf.OS, cf.Variant = plat.Architecture, plat.OS, plat.Variant
	env := o.Env
	if !hasPath(env) {
		env = append([]string{defaultPath}, env...)
	}
	cf.Config = v1.Config{Entrypoint: o.Entrypoint, Cmd: o.Cmd, Env: env}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	refs := map[name.Reference]v1.Image{tag: img}
	for _, t := range o.MoreTags {
		more, err := name.NewTag(t)
		if err != nil {
			return fmt.Errorf("invalid -tag %q: %w", t, err)
		}
		refs[more] = img
	}
	tmp := o.Out + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", o.Out, err)
	}
	return os.Rename(tmp, o.Out)
}

func hasPath(env []string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			return true
		}
	}
	return false
}

// emptyDirs are the root's folders that the runtime mounts over (proc,
// sysfs, a tmpfs /dev): the layer has them, empty, whatever a root that
// was in use (debootstrap mounts /proc and /sys in its target) holds.
var emptyDirs = map[string]bool{"proc": true, "sys": true, "dev": true}

// fileID names a file for finding its hard links.
type fileID struct{ dev, ino uint64 }

// writeLayer writes dir's tree as an uncompressed tar at path: folders,
// files, symlinks and hard-linked files as such, with their modes and
// numeric owners; sockets, devices and fifos left out (a running root's
// /dev and /run are not the image's). The walk is in lexical order and
// every time is the epoch, so the same tree gives the same bytes.
func writeLayer(dir, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	// file → first name, for hard links.
	seen := map[fileID]string{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode()
		if !mode.IsRegular() && !mode.IsDir() && mode&fs.ModeSymlink == 0 {
			return nil
		}
		var link string
		if mode&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		h.ModTime, h.AccessTime, h.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st != nil {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
			if mode.IsRegular() && st.Nlink > 1 {
				id := fileID{uint64(st.Dev), st.Ino}
				if first, ok := seen[id]; ok {
					h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
				} else {
					seen[id] = h.Name
				}
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.IsDir() && emptyDirs[rel] {
			return fs.SkipDir
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
