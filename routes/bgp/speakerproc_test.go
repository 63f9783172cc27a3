package bgp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
)

// benchPrefixes is how many prefixes BenchmarkAnnounceToBird announces:
// as many as the pod subnets of a 5,000-node cluster.
const benchPrefixes = 5000

// benchPrefix is the i-th: 10.(128+i/256).(i%256).0/24.
func benchPrefix(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(128 + i/256), byte(i % 256), 0}), 24)
}

// speakerEnv makes the test binary a speaker that announces benchPrefixes
// prefixes to the bird at 10.77.0.1 (speakerMain).
const speakerEnv = "VMLANE_TEST_BGP_SPEAKER"

// speakerMain is the speaker process of BenchmarkAnnounceToBird: vmlaned's
// Speaker, as vmlaned runs it, announcing benchPrefixes prefixes at once,
// until stdin closes.
func speakerMain() {
	ps := make([]netip.Prefix, benchPrefixes)
	for i := range ps {
		ps[i] = benchPrefix(i)
	}
	sp, err := Start(context.Background(), Config{ASN: 64513, RouterID: netip.MustParseAddr("10.77.0.2"),
		Peers: []Peer{{Addr: netip.MustParseAddr("10.77.0.1"), ASN: 64512}}, NextHop4: netip.MustParseAddr("10.77.0.2")},
		NewMetrics(nil), slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sp.Announce(ps)
	io.Copy(io.Discard, os.Stdin)
	sp.Stop()
}
