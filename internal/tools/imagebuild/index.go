package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func runIndex(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("imagebuild index", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tag, ociDir, tarPrefix string
	fs.StringVar(&tag, "tag", "", "the reference the index is released as, like ghcr.io/vmlane/vmlane:v0.4.0")
	fs.StringVar(&ociDir, "oci", "", "the OCI image layout folder to write (made new)")
	fs.StringVar(&tarPrefix, "tar", "", "also write PREFIX-linux-ARCH.tar, each image tagged -tag, for ctr images import")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case tag == "":
		return errors.New("-tag is required")
	case ociDir == "":
		return errors.New("-oci is required")
	case fs.NArg() == 0:
		return errors.New("no image tarballs given")
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("invalid -tag %q: %w", tag, err)
	}
	idx, imgs, err := multiPlatform(fs.Args())
	if err != nil {
		return err
	}
	if err := writeLayout(ociDir, idx, ref); err != nil {
		return err
	}
	if tarPrefix != "" {
		for _, pi := range imgs {
			out := fmt.Sprintf("%s-%s-%s.tar", tarPrefix, pi.platform.OS, pi.platform.Architecture)
			if err := tarball.WriteToFile(out+".tmp", ref, pi.img); err != nil {
				os.Remove(out + ".tmp")
				return fmt.Errorf("writing %s: %w", out, err)
			}
			if err := os.Rename(out+".tmp", out); err != nil {
				return err
			}
		}
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, d)
	return err
}

// platformImage is one image of a multi-platform index.
type platformImage struct {
	platform v1.Platform
	img      v1.Image
}

// multiPlatform reads the image of each tarball (pack's output: one
// image, which may have several tags) and makes the OCI image index of
// them, one per platform, sorted by architecture. Each image is given OCI
// media types (a tarball keeps none, and reads back as Docker's), its
// layers and config unchanged, so the same tarballs give the same digests.
func multiPlatform(paths []string) (v1.ImageIndex, []platformImage, error) {
	var imgs []platformImage
	seen := map[string]string{}
	for _, p := range paths {
		img, err := tarball.ImageFromPath(p, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("reading %s: %w", p, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, nil, fmt.Errorf("reading %s: %w", p, err)
		}
		plat := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
		if plat.OS == "" || plat.Architecture == "" {
			return nil, nil, fmt.Errorf("%s: the image's config names no OS or architecture", p)
		}
		key := plat.OS + "/" + plat.Architecture
		if other, ok := seen[key]; ok {
			return nil, nil, fmt.Errorf("%s and %s are both %s images", other, p, key)
		}
		seen[key] = p
		oci, err := asOCI(img, cf)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p, err)
		}
		imgs = append(imgs, platformImage{plat, oci})
	}
	sort.Slice(imgs, func(i, j int) bool { return imgs[i].platform.Architecture < imgs[j].platform.Architecture })
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pi := range imgs {
		plat := pi.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        pi.img,
			Descriptor: v1.Descriptor{Platform: &plat},
		})
	}
	return idx, imgs, nil
}

// asOCI is img with OCI media types: the manifest, the config and each
// layer (gzipped tar).
func asOCI(img v1.Image, cf *v1.ConfigFile) (v1.Image, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	out := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, l := range layers {
		if out, err = mutate.Append(out, mutate.Addendum{Layer: l, MediaType: types.OCILayer}); err != nil {
			return nil, err
		}
	}
	// The config as it was: its diff_ids are those of the same layers.
	return mutate.ConfigFile(out, cf)
}

// writeLayout writes dir as a new OCI image layout whose index.json has
// the one entry idx, annotated with the reference's tag as the OCI
// image-spec's org.opencontainers.image.ref.name (what `skopeo copy
// oci:DIR:TAG` and `crane push DIR` find it by).
func writeLayout(dir string, idx v1.ImageIndex, ref name.Tag) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
	}))
}
