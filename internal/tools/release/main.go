// Command release writes the parts of a vmlane release that are files:
// `make release` runs it. Every archive it writes is reproducible: the
// same inputs give the same bytes (entries sorted, owned by root, dated
// at the release's commit time, gzip without a name or a time), so that
// SHA256SUMS can be checked against a rebuild.
//
//	release darwin-archive -version V -arch ARCH -bin DIR -darwin DIR -mtime UNIX -out FILE
//	    vmlane-V-darwin-ARCH/ with vmlaned, vmlanectl and vmlane-vmnet from -bin, and
//	    install.sh and the launchd plist from -darwin (manifests/darwin):
//	    unpacked, `sudo ./install.sh --kubeconfig FILE` installs from it.
//	release notes -version V -changelog CHANGELOG.md
//	    prints the changelog's section for V (from its "## V" heading to
//	    the next "## "), the release notes; fails when there is none.
//	release normalize-tgz -in FILE -mtime UNIX -out FILE
//	    the same gzipped tar with every entry dated -mtime, owned by 0:0
//	    without names, and gzip without a name or time: `helm package`
//	    stamps the clock on its entries, so two packagings of one chart
//	    differ without this.
//	release sums DIR
//	    writes DIR/SHA256SUMS: `sha256sum -c SHA256SUMS` format, every
//	    regular file of DIR but itself, sorted.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/vmlane/vmlane/internal/version"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: release darwin-archive|notes|normalize-tgz|sums ...")
	}
	fs := flag.NewFlagSet("release "+args[0], flag.ContinueOnError)
	ver := fs.String("version", "", "the release, vMAJOR.MINOR.PATCH")
	switch args[0] {
	case "darwin-archive":
		arch := fs.String("arch", "", "arm64 or amd64")
		bin := fs.String("bin", "", "folder with the darwin vmlaned, vmlanectl and vmlane-vmnet")
		darwin := fs.String("darwin", "", "manifests/darwin")
		mtime := fs.Int64("mtime", 0, "the entries' time, seconds since 1970 (the release commit's)")
		out := fs.String("out", "", "the .tar.gz to write")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if err := checkVersion(*ver); err != nil {
			return err
		}
		if *arch != "arm64" && *arch != "amd64" {
			return fmt.Errorf("-arch %q: want arm64 or amd64", *arch)
		}
		if *bin == "" || *darwin == "" || *out == "" {
			return fmt.Errorf("-bin, -darwin and -out are required")
		}
		return writeDarwinArchive(*out, *ver, *arch, *bin, *darwin, time.Unix(*mtime, 0))
	case "notes":
		changelog := fs.String("changelog", "CHANGELOG.md", "the changelog")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if err := checkVersion(*ver); err != nil {
			return err
		}
		data, err := os.ReadFile(*changelog)
		if err != nil {
			return err
		}
		notes, err := releaseNotes(string(data), *ver)
		if err != nil {
			return fmt.Errorf("%s: %w", *changelog, err)
		}
		_, err = io.WriteString(stdout, notes)
		return err
	case "normalize-tgz":
		in := fs.String("in", "", "the .tgz to read")
		out := fs.String("out", "", "the .tgz to write (may be -in)")
		mtime := fs.Int64("mtime", 0, "the entries' time, seconds since 1970")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *in == "" || *out == "" {
			return fmt.Errorf("-in and -out are required")
		}
		return normalizeTgz(*in, *out, time.Unix(*mtime, 0))
	case "sums":
		if len(args) != 2 {
			return fmt.Errorf("usage: release sums DIR")
		}
		return writeSums(args[1])
	}
	return fmt.Errorf("unknown command %q: want darwin-archive, notes, normalize-tgz or sums", args[0])
}

func checkVersion(v string) error {
	if !version.IsRelease(v) {
		return fmt.Errorf("-version %q is not a release version: want vMAJOR.MINOR.PATCH (e.g. v0.4.0, v0.4.0-rc.1)", v)
	}
	return nil
}
