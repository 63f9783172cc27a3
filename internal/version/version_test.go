package version

import (
	"runtime"
	"testing"
)

func TestString(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v0.4.0"
	got := String("vmlaned")
	want := "vmlaned v0.4.0 (" + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
}

func TestIsRelease(t *testing.T) {
	for v, want := range map[string]bool{
		"v0.4.0": true, "v1.10.2": true, "v0.4.0-rc.1": true,
		"0.4.0": false, "v0.4": false, "v01.2.3": false, "dev": false,
		"v0.4.0-3-gabcdef0-dirty": true, // git describe past a tag: a pre-release by semver's grammar
		"v0.4.0 ":                 false, "v0.4.0+meta": false, "": false,
	} {
		if got := IsRelease(v); got != want {
			t.Errorf("IsRelease(%q) = %v, want %v", v, got, want)
		}
	}
}
