package vmnet

import (
	"errors"
	"net/netip"
	"testing"
)

func TestPrefixOf(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		addr, mask netip.Addr
		want       string
	}{
		{a("10.244.5.1"), a("255.255.255.0"), "10.244.5.0/24"},
		{a("10.244.5.0"), a("255.255.0.0"), "10.244.0.0/16"},
		{a("10.244.5.0"), a("255.0.255.0"), "invalid Prefix"},
		{netip.Addr{}, a("255.255.255.0"), "invalid Prefix"},
	} {
		if got := prefixOf(tc.addr, tc.mask).String(); got != tc.want {
			t.Errorf("prefixOf(%s, %s) = %s, want %s", tc.addr, tc.mask, got, tc.want)
		}
	}
}

func TestReplyError(t *testing.T) {
	for _, tc := range []struct {
		kind    replyKind
		network bool
		code    int64
		want    ErrorCode // 0: no error
	}{
		{replyDictionary, true, 0, 0},
		{replyDictionary, false, 5, NotFound},
		{replyDictionary, false, 3, NotAllowed},
		{replyDictionary, false, 0, InvalidReply},
		{replyXPCError, false, 0, XPCFailure},
		{replyOther, true, 0, InvalidReply},
	} {
		err := replyError(tc.kind, tc.network, tc.code, "pod")
		var be *BrokerError
		switch {
		case tc.want == 0 && err != nil:
			t.Errorf("%+v: %v, want the network", tc, err)
		case tc.want != 0 && (!errors.As(err, &be) || be.Code != tc.want || be.Network != "pod"):
			t.Errorf("%+v: %v, want %v", tc, err, tc.want)
		}
	}
}
