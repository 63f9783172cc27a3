package leases

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestFullDiskKeepsOldFile runs a write into a real full file system: a
// 256 KiB tmpfs mounted in a private mount namespace (unshare -m), so the
// host's mounts never see it and it vanishes with the child process.
func TestFullDiskKeepsOldFile(t *testing.T) {
	if os.Getenv("VMLANE_FULLDISK_CHILD") == "1" {
		fullDiskChild(t)
		return
	}
	// leases imports nothing of vmlane's, its tests included, so this is
	// internal/testing/privtest.Require written out.
	missing := func(why string) {
		if os.Getenv("VMLANE_PRIVILEGED") == "require" {
			t.Fatal(why + " (VMLANE_PRIVILEGED=require: not skipping)")
		}
		t.Skip(why)
	}
	if os.Geteuid() != 0 {
		missing("needs root to mount a tmpfs in a private mount namespace; run `make test` as root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		missing("needs unshare (util-linux)")
	}
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", os.Args[0], "-test.run=^TestFullDiskKeepsOldFile$", "-test.v")
	cmd.Env = append(os.Environ(), "VMLANE_FULLDISK_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
}

func fullDiskChild(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Fatalf("mounting tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	p := netip.MustParsePrefix("10.1.0.0/16")
	s, err := Open(filepath.Join(dir, "leases.json"), p, netip.MustParseAddr("10.1.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		mustReserve(t, s, cniReq(string(rune('a'+i))))
	}
	before, _ := os.ReadFile(s.Path())
	// Fill the file system to the last byte.
	filler, _ := os.Create(filepath.Join(dir, "filler"))
	buf := make([]byte, 4096)
	for {
		if _, err := filler.Write(buf); err != nil {
			break
		}
	}
	filler.Write(buf[:1])
	filler.Close()
	_, err = s.Reserve(cniReq("z"))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Reserve on a full disk = %v, want ENOSPC", err)
	}
	after, err := os.ReadFile(s.Path())
	if err != nil || string(after) != string(before) {
		t.Fatalf("failed write changed the lease file: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 { // leases.json, .lock, filler
		t.Errorf("temp files left behind: %v", ents)
	}
	if _, err := Read(s.Path()); err != nil {
		t.Fatal(err)
	}
	// The failed write left nothing in memory: the next operation reads
	// the file on disk (the old one) and decodes it.
	n := s.decodes()
	if ls, err := s.List(); err != nil || len(ls) != 20 {
		t.Fatalf("after the failed write the store lists %d leases (%v), want the 20 on disk", len(ls), err)
	}
	if s.decodes() != n+1 {
		t.Errorf("after a failed write the store served its cache instead of decoding the file")
	}
}
