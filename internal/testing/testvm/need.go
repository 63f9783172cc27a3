package testvm

import (
	"errors"
	"testing"

	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// Need returns the built guest for a test, after privtest.Require of root,
// QEMU and the given commands. An unbuilt guest skips t (or fails it when
// privileged tests are required); any other error fails it.
func Need(t testing.TB, commands ...string) Guest {
	t.Helper()
	privtest.Require(t, append([]string{"qemu-system-x86_64"}, commands...)...)
	g, err := Find()
	if errors.Is(err, ErrNotBuilt) {
		privtest.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return g
}
