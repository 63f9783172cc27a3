package pf

import (
	"strings"
	"testing"
)

func TestCheckHook(t *testing.T) {
	const stock = "nat-anchor \"com.apple/*\" all\nrdr-anchor \"com.apple/*\" all\n"
	for _, tc := range []struct{ name, nat, want string }{
		{"stock pf.conf", stock, ""},
		{"with vmnet's sharing after the hook", stock + "nat-anchor \"com.apple.internet-sharing/*\" all\n", ""},
		{"bare hook line", "nat-anchor \"com.apple/*\"\n", ""},
		{"ruleset replaced", "nat on en0 from 10.0.0.0/8 to any -> (en0)\n", "has no nat-anchor"},
		{"empty", "", "has no nat-anchor"},
		{"another anchor only", "nat-anchor \"com.apple.other/*\" all\n", "has no nat-anchor"},
		{"sharing first", "nat-anchor \"com.apple.internet-sharing/*\" all\n" + stock, "before nat-anchor"},
	} {
		err := CheckHook(tc.nat)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: CheckHook = %v, want %q", tc.name, err, tc.want)
		}
	}
}
