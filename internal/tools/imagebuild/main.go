// Command imagebuild packs a folder into a one-layer container image
// tarball (the format `docker save` writes, which `ctr images import` and
// `docker load` read), without Docker or a registry: `make image` builds
// vmlane's image and the e2e suite's pause and test images with it
// (internal/tools/imagebuild/build.sh).
//
//	imagebuild pack -dir ROOT -tag REF [-tag REF]... -o OUT.tar -entrypoint /bin/sh [-cmd vmlaned] [-env K=V]
//	imagebuild pause -bin PAUSE -o OUT.tar [-tag registry.k8s.io/pause:3.10]
//	imagebuild index -tag REF -oci DIR [-tar PREFIX] IMAGE.tar...
//	imagebuild push -oci DIR -to REF [-insecure]
//
// pack packs ROOT as the image's whole file system; pause makes the image
// of one static program, /pause (internal/tools/imagebuild/pause), the sandbox
// image of the e2e suite's nodes. index makes a release's multi-platform
// image out of per-architecture tarballs that pack wrote: an OCI image
// layout at DIR whose index.json names one OCI image index (one image per
// platform) as REF, and with -tar, PREFIX-linux-ARCH.tar, each image as a
// tarball tagged REF; it prints the index's digest. push sends that index
// and its images to a registry (the release workflow's step).
//
// The layer is deterministic: entries sorted, times zeroed, owners kept
// as numbers without names, so the same tree gives the same image digest.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

const usage = `usage:
  imagebuild pack -dir ROOT -tag REF [-tag REF]... -o OUT.tar -entrypoint PROG [-entrypoint ARG]... [-cmd ARG]... [-env K=V]...
  imagebuild pause -bin PAUSE -o OUT.tar [-tag REF]
  imagebuild index -tag REF -oci DIR [-tar PREFIX] IMAGE.tar...
  imagebuild push -oci DIR -to REF [-insecure]`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("no subcommand\n" + usage)
	}
	switch args[0] {
	case "pack":
		return runPack(args[1:], stderr)
	case "pause":
		return runPause(args[1:], stderr)
	case "index":
		return runIndex(args[1:], stdout, stderr)
	case "push":
		return runPush(args[1:], stdout, stderr)
	default:
		return fmt.Errorf("unknown subcommand %q\n%s", args[0], usage)
	}
}

func runPack(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("imagebuild pack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o packOptions
	var entry, cmd, env, tags stringList
	fs.StringVar(&o.Dir, "dir", "", "the image's root folder")
	fs.Var(&tags, "tag", "the image reference, like ghcr.io/vmlane/vmlane:dev (repeatable: one image under several names)")
	fs.StringVar(&o.Out, "o", "", "the tarball to write")
	fs.Var(&entry, "entrypoint", "the entrypoint, one flag per argument")
	fs.Var(&cmd, "cmd", "the default arguments, one flag per argument")
	fs.Var(&env, "env", "an environment variable K=V (repeatable; PATH has a default)")
	fs.StringVar(&o.Arch, "arch", "amd64", "the architecture the root's programs are for: amd64 or arm64")
	if err := parse(fs, args); err != nil {
		return err
	}
	o.Entrypoint, o.Cmd, o.Env = entry, cmd, env
	if len(tags) > 0 {
		o.Tag, o.MoreTags = tags[0], tags[1:]
	}
	switch {
	case o.Dir == "":
		return errors.New("-dir is required")
	case o.Tag == "":
		return errors.New("-tag is required")
	case o.Out == "":
		return errors.New("-o is required")
	case len(o.Entrypoint) == 0:
		return errors.New("-entrypoint is required")
	}
	if fi, err := os.Stat(o.Dir); err != nil {
		return fmt.Errorf("invalid -dir %q: %w", o.Dir, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("invalid -dir %q: not a folder", o.Dir)
	}
	for _, kv := range o.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("invalid -env %q: want KEY=VALUE", kv)
		}
	}
	return pack(o)
}

// pauseTag is the sandbox image containerd 2.x and 1.7 name by default;
// the e2e suite's nodes pin it, with no registry to pull it from.
const pauseTag = "registry.k8s.io/pause:3.10"

func runPause(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("imagebuild pause", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var bin, out, tag string
	fs.StringVar(&bin, "bin", "", "the static pause program (go build ./internal/tools/imagebuild/pause)")
	fs.StringVar(&out, "o", "", "the tarball to write")
	fs.StringVar(&tag, "tag", pauseTag, "the image reference")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case bin == "":
		return errors.New("-bin is required")
	case out == "":
		return errors.New("-o is required")
	}
	if fi, err := os.Stat(bin); err != nil {
		return fmt.Errorf("invalid -bin %q: %w", bin, err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("invalid -bin %q: not a regular file", bin)
	}
	// The binary alone, as /pause, in a folder of its own beside the
	// output (one file system, so nothing large goes through /tmp).
	dir, err := os.MkdirTemp(filepath.Dir(out), ".pause-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := copyFile(bin, filepath.Join(dir, "pause"), 0o755); err != nil {
		return err
	}
	return pack(packOptions{Dir: dir, Tag: tag, Out: out, Entrypoint: []string{"/pause"}})
}

// parse parses args into fs and rejects leftover arguments, which are a
// mistake here (a value with a space in a shell variable, say).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	// The umask may have taken bits off.
	return os.Chmod(dst, mode)
}
