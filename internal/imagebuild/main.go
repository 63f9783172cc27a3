// Command imagebuild packs a folder into a one-layer container image
// tarball (the format `docker save` writes, which `ctr images import` and
// `docker load` read), without Docker or a registry: `make image` builds
// vmlane's image and the e2e suite's pause and test images with it
// (internal/imagebuild/build.sh).
//
//	imagebuild -dir ROOT -tag REF -o OUT.tar -entrypoint /bin/sh [-cmd vmlaned] [-env K=V]
//
// The layer is deterministic: entries sorted, times zeroed, owners kept
// as numbers, so the same tree gives the same image digest.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	var o packOptions
	var entry, cmd, env stringList
	fs.StringVar(&o.Dir, "dir", "", "the image's root folder")
	fs.StringVar(&o.Tag, "tag", "", "the image reference, like ghcr.io/vmlane/vmlane:dev")
	fs.StringVar(&o.Out, "o", "", "the tarball to write")
	fs.Var(&entry, "entrypoint", "the entrypoint, one flag per argument")
	fs.Var(&cmd, "cmd", "the default arguments, one flag per argument")
	fs.Var(&env, "env", "an environment variable K=V (repeatable; PATH has a default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Entrypoint, o.Cmd, o.Env = entry, cmd, env
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
	for _, kv := range o.Env {
		if !strings.Contains(kv, "=") {
			return fmt.Errorf("invalid -env %q: want KEY=VALUE", kv)
		}
	}
	return pack(o)
}
