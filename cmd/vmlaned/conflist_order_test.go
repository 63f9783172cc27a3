package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConflistWatch: another network's config that sorts first is
// reported once per change, in each folder vmlane writes to, and the
// all-clear when it goes; vmlane never removes it.
func TestConflistWatch(t *testing.T) {
	dir, vmDir := t.TempDir(), t.TempDir()
	touch := func(d, name string) {
		if err := os.WriteFile(filepath.Join(d, name), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	touch(dir, ConflistName)
	touch(vmDir, VMConflistName)
	touch(dir, "99-loopback.conf")    // sorts after: harmless
	touch(dir, "00-notes.txt")        // not a config
	touch(vmDir, ".99-vmlane-vm.tmp") // a temp file of ours
	w := newConflistWatch(&config{CNIConfDir: dir, VMCNIConfDir: vmDir})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var got []string
	warn := func(msg string) { got = append(got, msg) }

	w.check(log, warn)
	if len(got) != 0 {
		t.Fatalf("warned with vmlane's conflists first: %q", got)
	}
	touch(dir, "05-cilium.conflist")
	touch(vmDir, "10-flannel.conf")
	w.check(log, warn)
	w.check(log, warn) // no change, no new warning
	if len(got) != 2 || !strings.Contains(got[0], "05-cilium.conflist sorts before "+ConflistName+" in "+dir) ||
		!strings.Contains(got[1], "10-flannel.conf sorts before "+VMConflistName) {
		t.Fatalf("warnings: %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "05-cilium.conflist")); err != nil {
		t.Errorf("vmlane removed another network's config: %v", err)
	}
	os.Remove(filepath.Join(dir, "05-cilium.conflist"))
	w.check(log, warn)
	if len(got) != 2 || w.last[dir] != "" {
		t.Errorf("after removal: warnings %q, last %q", got, w.last[dir])
	}
}
