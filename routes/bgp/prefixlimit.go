package bgp

import (
	"context"
	"fmt"
	"time"

	api "github.com/osrg/gobgp/v4/api"
)

// prefixLimitRetry is how long a session that a peer's prefixes ended
// (Config.MaxPrefixes) stays down before the speaker connects again: GoBGP
// leaves such a peer administratively down for good, and a node whose
// sessions are all down is not reached from other subnets. The peer is
// deleted and added again rather than enabled: GoBGP keeps a peer's paths
// as stale after its TCP connection closes (the peer closes it at the
// Cease), and counts them against the limit of the next session, which a
// peer that now sends fewer would then never get past.
var prefixLimitRetry = time.Minute

// prefixLimited takes the peers whose sessions GoBGP ended at the prefix
// limit (their admin state is PFX_CT): it reports each once, then lets it
// connect again after prefixLimitRetry. A peer that still sends too many
// is cut again, at most once a prefixLimitRetry.
func (sp *Speaker) prefixLimited(ctx context.Context, peers []*api.PeerState) {
	if sp.limited == nil {
		sp.limited = map[string]time.Time{}
	}
	now := time.Now()
	for _, st := range peers {
		addr := st.GetNeighborAddress()
		since, seen := sp.limited[addr]
		if !seen {
			sp.limited[addr] = now
			m := fmt.Sprintf("BGP peer %s (AS %d) sent more than %d prefixes of a family (--bgp-max-prefixes): its session is ended (Cease, Maximum Number of Prefixes Reached, RFC 4486), so the peer drops this node's routes; vmlaned connects again in %s",
				addr, st.GetPeerAsn(), sp.cfg.MaxPrefixes, prefixLimitRetry)
			sp.log.Error(m)
			sp.metrics.refused(addr)
			sp.report("VmlaneBGPPrefixLimit", m)
			continue
		}
		if now.Sub(since) < prefixLimitRetry {
			continue
		}
		delete(sp.limited, addr)
		peer := sp.peers[addr]
		if peer == nil {
			continue
		}
		if err := sp.s.DeletePeer(ctx, &api.DeletePeerRequest{Address: addr}); err != nil {
			sp.log.Warn("BGP: removing a peer cut at its prefix limit", "peer", addr, "err", err)
			continue
		}
		if err := sp.s.AddPeer(ctx, &api.AddPeerRequest{Peer: peer}); err != nil {
			sp.log.Error("BGP: adding back a peer cut at its prefix limit", "peer", addr, "err", err)
			continue
		}
		sp.log.Info("BGP: connecting again to a peer cut at its prefix limit", "peer", addr)
	}
}
