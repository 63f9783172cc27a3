package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "leases.json")
	if err := WriteFile(path, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "two\n" {
		t.Fatalf("content %q, %v", b, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v; want 0644 whatever the umask and the old file's", fi.Mode(), err)
	}
	assertOnly(t, dir, "leases.json")
}

// TestWriteFileFailureLeavesOld: when the rename cannot happen (path is a
// non-empty folder), path keeps what it had and no temp file is left.
func TestWriteFileFailureLeavesOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "taken")
	if err := os.MkdirAll(filepath.Join(path, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(path, []byte("x"), 0o644)
	if err == nil || !strings.Contains(err.Error(), "renaming") {
		t.Fatalf("err = %v, want a rename error", err)
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Fatalf("path changed: %v, %v", fi, err)
	}
	assertOnly(t, dir, "taken")
}

func TestWriteFileMissingFolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "file")
	if err := WriteFile(path, []byte("x"), 0o644); err == nil {
		t.Fatal("wrote into a folder that does not exist")
	}
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("folder holds %v, want %v (a temp file left behind?)", got, names)
	}
}

// TestWriteFileAll: the folder is made when missing, and the file written.
func TestWriteFileAll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db", "vmlane", "state.json")
	if err := WriteFileAll(path, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "{}\n" {
		t.Errorf("read back %q, %v", b, err)
	}
}
