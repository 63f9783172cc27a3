package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/vmlane/vmlane/internal/atomicfile"
)

// darwinFiles are the macOS archive's files: name in the archive, the
// flag's folder it comes from, and its mode.
var darwinFiles = []struct {
	name, from string
	mode       int64
}{
	{"vmlaned", "bin", 0o755},
	{"vmlanectl", "bin", 0o755},
	{"vmlane-vmnet", "bin", 0o755},
	{"install.sh", "darwin", 0o755},
	{"dev.vmlane.vmlaned.plist", "darwin", 0o644},
	{"dev.vmlane.vmnet.plist", "darwin", 0o644},
	{"vmlane-vmnet.entitlements", "darwin", 0o644},
}

// writeDarwinArchive writes the macOS archive: one folder,
// vmlane-VERSION-darwin-ARCH, holding darwinFiles. install.sh finds the
// binaries and the plist beside itself.
func writeDarwinArchive(out, ver, arch, bin, darwin string, mtime time.Time) error {
	top := fmt.Sprintf("vmlane-%s-darwin-%s", ver, arch)
	return writeTgz(out, func(tw *tar.Writer) error {
		if err := tw.WriteHeader(header(top+"/", tar.TypeDir, 0o755, 0, mtime)); err != nil {
			return err
		}
		for _, f := range darwinFiles {
			dir := bin
			if f.from == "darwin" {
				dir = darwin
			}
			data, err := os.ReadFile(filepath.Join(dir, f.name))
			if err != nil {
				return err
			}
			if f.from == "bin" && !isMachO(data) {
				return fmt.Errorf("%s is not a macOS (Mach-O) binary", filepath.Join(dir, f.name))
			}
			if err := tw.WriteHeader(header(top+"/"+f.name, tar.TypeReg, f.mode, int64(len(data)), mtime)); err != nil {
				return err
			}
			if _, err := tw.Write(data); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeTgz writes out, atomically, as a tar that fill writes, gzipped
// without a name or time.
func writeTgz(out string, fill func(*tar.Writer) error) error {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	if err := fill(tw); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return atomicfile.WriteFile(out, buf.Bytes(), 0o644)
}

// normalizeTgz rewrites the gzipped tar in as out, every entry in its
// order and with its content, name, type, mode and link, but dated mtime
// and owned by 0:0 without names, gzipped without a name or time.
func normalizeTgz(in, out string, mtime time.Time) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	tr := tar.NewReader(zr)
	return writeTgz(out, func(tw *tar.Writer) error {
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", in, err)
			}
			switch h.Typeflag {
			case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
			default:
				return fmt.Errorf("%s: %s is neither a file, a folder nor a symlink", in, h.Name)
			}
			nh := header(h.Name, h.Typeflag, h.Mode&0o7777, h.Size, mtime)
			nh.Linkname = h.Linkname
			if err := tw.WriteHeader(nh); err != nil {
				return err
			}
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
	})
}

// header is a tar header with nothing of the machine that wrote it: owner
// root:wheel by number only, one time for every entry.
func header(name string, typ byte, mode, size int64, mtime time.Time) *tar.Header {
	return &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: size, ModTime: mtime.UTC(), Format: tar.FormatPAX,
		Uid: 0, Gid: 0}
}

// isMachO: the 64-bit Mach-O magic, little-endian (arm64 and x86_64).
func isMachO(b []byte) bool {
	return len(b) >= 4 && b[0] == 0xcf && b[1] == 0xfa && b[2] == 0xed && b[3] == 0xfe
}

// releaseNotes is the changelog's section for ver: from the heading
// "## ver" (followed by nothing or by a space, as in "## v0.4.0 -
// 2026-12-01") to the next "## " heading, without the heading itself.
func releaseNotes(changelog, ver string) (string, error) {
	heading := regexp.MustCompile(`^## ` + regexp.QuoteMeta(ver) + `(\s|$)`)
	var b strings.Builder
	in := false
	sc := bufio.NewScanner(strings.NewReader(changelog))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			if in {
				break
			}
			in = heading.MatchString(line)
			continue
		}
		if in {
			b.WriteString(line + "\n")
		}
	}
	notes := strings.TrimSpace(b.String())
	if notes == "" {
		return "", fmt.Errorf("no section \"## %s\" (or it is empty): write the release's notes there first", ver)
	}
	return notes + "\n", nil
}

// writeSums writes dir/SHA256SUMS over every regular file below dir.
func writeSums(dir string) error {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.Type().IsRegular() && rel != "SHA256SUMS" {
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), name)
	}
	return atomicfile.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}
