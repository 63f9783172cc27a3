package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// runPush pushes the image index an OCI layout names (index's output) to
// a registry: what .github/workflows/release.yml does with a release's
// dist/oci. The credentials come from VMLANE_REGISTRY_USER and
// VMLANE_REGISTRY_PASSWORD (GitHub's token for ghcr.io); without them it
// pushes anonymously. (go-containerregistry's keychain of Docker's config
// would bring Docker's CLI modules into go.mod for nothing CI needs.)
func runPush(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("imagebuild push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ociDir, to string
	var insecure bool
	fs.StringVar(&ociDir, "oci", "", "the OCI image layout (imagebuild index -oci)")
	fs.StringVar(&to, "to", "", "the reference to push to, like ghcr.io/vmlane/vmlane:v0.4.0")
	fs.BoolVar(&insecure, "insecure", false, "plain HTTP to the registry (a local test registry)")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case ociDir == "":
		return errors.New("-oci is required")
	case to == "":
		return errors.New("-to is required")
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.NewTag(to, opts...)
	if err != nil {
		return fmt.Errorf("invalid -to %q: %w", to, err)
	}
	idx, err := layoutIndex(ociDir)
	if err != nil {
		return err
	}
	auth := remote.WithAuth(authn.Anonymous)
	if u := os.Getenv("VMLANE_REGISTRY_USER"); u != "" {
		auth = remote.WithAuth(&authn.Basic{Username: u, Password: os.Getenv("VMLANE_REGISTRY_PASSWORD")})
	}
	if err := remote.WriteIndex(ref, idx, auth); err != nil {
		return fmt.Errorf("pushing to %s: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s@%s\n", ref.Name(), d)
	return err
}

// layoutIndex is the one image index an OCI layout of index's names.
func layoutIndex(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the OCI layout %s: %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s names %d manifests, want one image index (imagebuild index writes one)", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}
