package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReleaseNotes(t *testing.T) {
	const changelog = `# Changelog

## Unreleased

- nothing yet

## v0.4.0 - 2026-12-01

The first release.

- hostPort
## v0.4.0-rc.1

- a candidate
`
	got, err := releaseNotes(changelog, "v0.4.0")
	if err != nil {
		t.Fatal(err)
	}
	if want := "The first release.\n\n- hostPort\n"; got != want {
		t.Errorf("notes of v0.4.0 = %q, want %q", got, want)
	}
	if got, err := releaseNotes(changelog, "v0.4.0-rc.1"); err != nil || got != "- a candidate\n" {
		t.Errorf("notes of v0.4.0-rc.1 = %q, %v", got, err)
	}
	for _, v := range []string{"v0.5.0", "v0.4"} {
		if _, err := releaseNotes(changelog, v); err == nil || !strings.Contains(err.Error(), "## "+v) {
			t.Errorf("notes of %s: err %v, want one naming the missing heading", v, err)
		}
	}
}

// fakeMachO is a file the archive takes for a macOS binary.
func fakeMachO(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, append([]byte{0xcf, 0xfa, 0xed, 0xfe}, filepath.Base(path)...), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestDarwinArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	fakeMachO(t, filepath.Join(bin, "vmlaned"))
	fakeMachO(t, filepath.Join(bin, "vmlanectl"))
	fakeMachO(t, filepath.Join(bin, "vmlane-vmnet"))
	darwin := "../../../manifests/darwin"
	mtime := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a, b := filepath.Join(dir, "a.tar.gz"), filepath.Join(dir, "b.tar.gz")
	for _, out := range []string{a, b} {
		if err := writeDarwinArchive(out, "v0.4.0", "arm64", bin, darwin, mtime); err != nil {
			t.Fatal(err)
		}
		// A later run of the same inputs: nothing of the clock goes in.
		time.Sleep(1100 * time.Millisecond)
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Error("two archives of the same inputs differ: not reproducible")
	}

	gz, err := gzip.NewReader(bytes.NewReader(da))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(mtime) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s: time %v, owner %d:%d %q; want %v, 0:0", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, mtime)
		}
		if exec := h.Name == "vmlane-v0.4.0-darwin-arm64/install.sh" || strings.HasSuffix(h.Name, "/vmlaned"); exec && h.Mode != 0o755 {
			t.Errorf("%s: mode %o, want 755", h.Name, h.Mode)
		}
		if h.Name == "vmlane-v0.4.0-darwin-arm64/install.sh" {
			got, _ := io.ReadAll(tr)
			want, _ := os.ReadFile(filepath.Join(darwin, "install.sh"))
			if !bytes.Equal(got, want) {
				t.Error("the archive's install.sh is not manifests/darwin/install.sh")
			}
		}
	}
	want := "vmlane-v0.4.0-darwin-arm64/ vmlane-v0.4.0-darwin-arm64/vmlaned vmlane-v0.4.0-darwin-arm64/vmlanectl " +
		"vmlane-v0.4.0-darwin-arm64/vmlane-vmnet vmlane-v0.4.0-darwin-arm64/install.sh vmlane-v0.4.0-darwin-arm64/dev.vmlane.vmlaned.plist " +
		"vmlane-v0.4.0-darwin-arm64/dev.vmlane.vmnet.plist vmlane-v0.4.0-darwin-arm64/vmlane-vmnet.entitlements"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("entries %s\nwant %s", got, want)
	}

	// A Linux binary is refused, naming it.
	os.WriteFile(filepath.Join(bin, "vmlanectl"), []byte("\x7fELF"), 0o755)
	err = writeDarwinArchive(filepath.Join(dir, "c.tar.gz"), "v0.4.0", "arm64", bin, darwin, mtime)
	if err == nil || !strings.Contains(err.Error(), "vmlanectl is not a macOS (Mach-O) binary") {
		t.Errorf("a Linux vmlanectl: err %v", err)
	}
}

func TestSums(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "oci", "blobs"), 0o755)
	os.WriteFile(filepath.Join(dir, "b.txt"), []byte("b\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "oci", "blobs", "x"), []byte("x\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte("stale\n"), 0o644)
	if err := writeSums(dir); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	want := "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7  a.txt\n" +
		"0263829989b6fd954f72baaf2fc64bc2e2f01d692d4de72986ea808f6e99813f  b.txt\n" +
		"73cb3858a687a8494ca3323053016282f3dad39d42cf62ca4e79dda2aac7d9ac  oci/blobs/x\n"
	if string(got) != want {
		t.Errorf("SHA256SUMS:\n%s\nwant (sorted, itself left out):\n%s", got, want)
	}
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum --check: %v\n%s", err, out)
		}
	}
}

func TestRunChecksVersion(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"notes", "-version", "0.4.0"}, &out)
	if err == nil || !strings.Contains(err.Error(), `-version "0.4.0" is not a release version`) {
		t.Errorf("err %v", err)
	}
	err = run([]string{"darwin-archive", "-version", "v0.4.0", "-arch", "386"}, &out)
	if err == nil || !strings.Contains(err.Error(), `-arch "386"`) {
		t.Errorf("err %v", err)
	}
}

// normalize-tgz: entries dated alike, owners gone, content and order
// kept; two archives that differ only in times come out the same.
func TestNormalizeTgz(t *testing.T) {
	dir := t.TempDir()
	write := func(path string, when time.Time) {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		gz.ModTime = when
		tw := tar.NewWriter(gz)
		for _, f := range []struct{ name, body string }{{"vmlane/Chart.yaml", "name: vmlane\n"}, {"vmlane/values.yaml", "a: 1\n"}} {
			tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: when, Uname: "builder", Uid: 1000, Typeflag: tar.TypeReg})
			tw.Write([]byte(f.body))
		}
		tw.Close()
		gz.Close()
		os.WriteFile(path, buf.Bytes(), 0o644)
	}
	a, b := filepath.Join(dir, "a.tgz"), filepath.Join(dir, "b.tgz")
	write(a, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	write(b, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	if da, db := mustRead(t, a), mustRead(t, b); bytes.Equal(da, db) {
		t.Fatal("the inputs do not differ")
	}
	for _, p := range []string{a, b} {
		if err := run([]string{"normalize-tgz", "-in", p, "-out", p, "-mtime", "1764547200"}, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(mustRead(t, a), mustRead(t, b)) {
		t.Error("normalized, the two archives still differ")
	}
	zr, err := gzip.NewReader(bytes.NewReader(mustRead(t, a)))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		body, _ := io.ReadAll(tr)
		if h.Uid != 0 || h.Uname != "" || h.ModTime.Unix() != 1764547200 || len(body) == 0 {
			t.Errorf("%s: uid %d %q, time %v, %d bytes", h.Name, h.Uid, h.Uname, h.ModTime, len(body))
		}
	}
	if strings.Join(names, " ") != "vmlane/Chart.yaml vmlane/values.yaml" {
		t.Errorf("entries %q", names)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
