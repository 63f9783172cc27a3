package kernel

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string // "" for unchanged
	}{
		{nil, ""},
		{fmt.Errorf("creating: %w", syscall.ENOENT), "lacks TAP devices (/dev/net/tun): load it with `modprobe tun`"},
		{fmt.Errorf("adding redirect: %w", syscall.EOPNOTSUPP), "lacks TAP devices"},
		{fmt.Errorf("creating: %w", syscall.EEXIST), ""},
		{errors.New("plain"), ""},
	} {
		got := Explain(tc.err, Tun)
		if tc.want == "" {
			if got != tc.err {
				t.Errorf("Explain(%v) = %v, want it unchanged", tc.err, got)
			}
			continue
		}
		var me *MissingError
		if !errors.As(got, &me) || !strings.Contains(got.Error(), tc.want) || !errors.Is(got, tc.err) {
			t.Errorf("Explain(%v) = %v, want a *MissingError saying %q that wraps the original", tc.err, got, tc.want)
		}
	}
}
