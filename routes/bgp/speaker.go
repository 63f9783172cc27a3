package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	bgppkt "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// Reporter receives what an operator must hear of (an Event on the Node):
// reason is the Event's reason, msg says what happened.
type Reporter func(reason, msg string)

// Speaker is a node's BGP speaker.
type Speaker struct {
	cfg     Config
	log     *slog.Logger
	report  Reporter
	metrics *Metrics
	s       *server.BgpServer

	mu        sync.Mutex
	announced map[netip.Prefix]*apiutil.Path // guarded by mu
	noNextHop map[bool]bool                  // families already reported without a next hop; guarded by mu
	sessions  sessions                       // guarded by mu
	stopping  bool                           // guarded by mu
	stopPoll  context.CancelFunc
	// limited is when each peer's session was ended at the prefix
	// limit; poll's only. peers is each peer as Start added it.
	limited map[string]time.Time
	peers   map[string]*api.Peer
}

// families are the address families of every session: IPv4 and IPv6
// unicast, whichever family the session itself runs over.
var families = []*api.Family{
	{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST},
	{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST},
}

// Start checks cfg, starts GoBGP and adds the peers. The caller Stops the
// speaker when vmlaned stops.
func Start(ctx context.Context, cfg Config, m *Metrics, log *slog.Logger, report Reporter) (*Speaker, error) {
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("BGP: %w", err)
	}
	if cfg.RestartTime == 0 {
		cfg.RestartTime = DefaultRestartTime
	}
	if report == nil {
		report = func(string, string) {}
	}
	// GoBGP logs through vmlaned's logger and level (component=gobgp):
	// at info, a line per session change and per NOTIFICATION, with its
	// codes, which is what says why a peer refuses this node. The level
	// variable is only GoBGP's own SetLogLevel's.
	lvl := &slog.LevelVar{}
	sp := &Speaker{
		cfg: cfg, log: log, report: report, metrics: m,
		s:         server.NewBgpServer(server.LoggerOption(log.With("component", "gobgp"), lvl)),
		announced: map[netip.Prefix]*apiutil.Path{},
		noNextHop: map[bool]bool{},
		sessions:  sessions{up: map[string]bool{}, why: map[string]string{}},
		peers:     map[string]*api.Peer{},
	}
	go sp.s.Serve()
	restart := uint32(cfg.RestartTime / time.Second)
	if err := sp.s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:        cfg.ASN,
		RouterId:   cfg.RouterID.String(),
		ListenPort: -1, // connect only: port 179 may be another speaker's
	}}); err != nil {
		sp.s.Stop()
		return nil, fmt.Errorf("BGP: starting: %w", err)
	}
	// Learn nothing: GoBGP's global import policy sees this speaker's own
	// paths too, so they are the one thing it accepts.
	ownOnly := &api.Policy{Name: "vmlane-own-paths-only", Statements: []*api.Statement{{
		Name:       "accept-own",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
	}}}
	if err := sp.s.AddPolicy(ctx, &api.AddPolicyRequest{Policy: ownOnly}); err != nil {
		sp.Stop()
		return nil, fmt.Errorf("BGP: import policy: %w", err)
	}
	if err := sp.s.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_IMPORT,
		Policies: []*api.Policy{{Name: ownOnly.Name}}, DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
	}}); err != nil {
		sp.Stop()
		return nil, fmt.Errorf("BGP: import policy: %w", err)
	}
	if err := sp.s.WatchEvent(ctx, server.WatchEventMessageCallbacks{OnPeerUpdate: sp.onPeer}, server.WatchPeer()); err != nil {
		sp.Stop()
		return nil, fmt.Errorf("BGP: watching peers: %w", err)
	}
	pollCtx, stopPoll := context.WithCancel(context.Background())
	sp.stopPoll = stopPoll
	go sp.poll(pollCtx)
	for _, p := range cfg.Peers {
		afis := make([]*api.AfiSafi, 0, len(families))
		for _, f := range families {
			afi := &api.AfiSafi{
				Config:            &api.AfiSafiConfig{Family: f, Enabled: true},
				MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}},
			}
			if cfg.MaxPrefixes > 0 {
				// GoBGP warns at 80% and ends the session past the
				// limit (peer.isPrefixLimit).
				afi.PrefixLimits = &api.PrefixLimit{Family: f, MaxPrefixes: cfg.MaxPrefixes, ShutdownThresholdPct: 80}
			}
			afis = append(afis, afi)
		}
		peer := &api.Peer{
			Conf: &api.PeerConf{NeighborAddress: p.Addr.String(), PeerAsn: p.ASN, AuthPassword: cfg.Password},
			GracefulRestart: &api.GracefulRestart{
				Enabled: true, RestartTime: restart,
				// Every start is a restart as far as peers know: they
				// keep the stale routes until this speaker's End-of-RIB.
				LocalRestarting: true,
				// Do not wait long for a peer's End-of-RIB before
				// sending: peers that learn nothing from here may
				// never send one.
				DeferralTime: 10,
			},
			// Reconnect within seconds of a flap (GoBGP waits 30 s).
			Timers:    &api.Timers{Config: &api.TimersConfig{ConnectRetry: 5, HoldTime: 90, KeepaliveInterval: 30, IdleHoldTimeAfterReset: 5}},
			AfiSafis:  afis,
			Transport: &api.Transport{RemotePort: uint32(p.Port)},
		}
		if err := sp.s.AddPeer(ctx, &api.AddPeerRequest{Peer: peer}); err != nil {
			sp.Stop()
			return nil, fmt.Errorf("BGP: adding peer %s: %w", p, err)
		}
		sp.peers[p.Addr.String()] = peer
		m.setUp(p.Addr.String(), false)
	}
	log.Info("BGP speaker up", "asn", cfg.ASN, "routerID", cfg.RouterID, "peers", fmt.Sprint(cfg.Peers), "restartTime", cfg.RestartTime, "md5", cfg.Password != "", "maxPrefixes", cfg.MaxPrefixes)
	return sp, nil
}

// Stop ends the sessions without withdrawing anything: the TCP
// connections close without a Cease, so peers keep the routes for the
// restart time (graceful restart), as after a crash.
func (sp *Speaker) Stop() {
	sp.mu.Lock()
	sp.stopping = true
	sp.mu.Unlock()
	if sp.stopPoll != nil {
		sp.stopPoll()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sp.s.StopBgp(ctx, &api.StopBgpRequest{AllowGracefulRestart: true}); err != nil {
		sp.log.Warn("stopping BGP", "err", err)
	}
	sp.s.Stop()
}

// Announce makes the set of announced prefixes exactly ps (their order
// does not matter): new ones are announced, gone ones withdrawn. A prefix
// of a family without a next hop is left out and reported once.
func (sp *Speaker) Announce(ps []netip.Prefix) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	want := map[netip.Prefix]bool{}
	for _, p := range ps {
		p = p.Masked()
		if nextHop(sp.cfg, p).IsValid() {
			want[p] = true
			continue
		}
		if v4 := p.Addr().Is4(); !sp.noNextHop[v4] {
			sp.noNextHop[v4] = true
			msg := fmt.Sprintf("no %s next hop: %s and the node's other prefixes of that family are not announced (the node has no address of the family)", familyName(p), p)
			sp.log.Warn(msg)
			sp.report("VmlaneBGPNotAnnounced", msg)
		}
	}
	var add, del []*apiutil.Path
	var added []netip.Prefix
	for p := range want {
		if sp.announced[p] == nil {
			path, err := pathFor(p, nextHop(sp.cfg, p))
			if err != nil {
				sp.log.Error("BGP path", "prefix", p, "err", err)
				continue
			}
			add, added = append(add, path), append(added, p)
		}
	}
	for p, path := range sp.announced {
		if !want[p] {
			del = append(del, path)
			delete(sp.announced, p)
		}
	}
	if len(add) > 0 {
		res, err := sp.s.AddPath(apiutil.AddPathRequest{Paths: add})
		for i, p := range added {
			if err == nil && i < len(res) && res[i].Error == nil {
				sp.announced[p] = add[i]
			} else if err == nil && i < len(res) {
				sp.log.Error("announcing", "prefix", p, "err", res[i].Error)
			}
		}
		if err != nil {
			sp.log.Error("announcing", "prefixes", fmt.Sprint(added), "err", err)
		}
	}
	if len(del) > 0 {
		if err := sp.s.DeletePath(apiutil.DeletePathRequest{Paths: del}); err != nil {
			sp.log.Error("withdrawing", "err", err)
		}
	}
	if len(add)+len(del) > 0 {
		sp.log.Info("BGP announcements", "announced", len(sp.announced), "added", len(add), "withdrawn", len(del))
	}
	sp.metrics.setAnnounced(len(sp.announced))
}

// Announced returns what is announced now, sorted.
func (sp *Speaker) Announced() []netip.Prefix {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	out := make([]netip.Prefix, 0, len(sp.announced))
	for p := range sp.announced {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out
}

// Established reports whether the session with peer is up.
func (sp *Speaker) Established(peer netip.Addr) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.sessions.up[peer.String()]
}

func (sp *Speaker) onPeer(e *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
	if e.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	st := e.Peer.State
	sp.observe(st.NeighborAddress.String(), st.PeerASN, st.SessionState == bgppkt.BGP_FSM_ESTABLISHED,
		st.SessionState == bgppkt.BGP_FSM_IDLE || st.SessionState == bgppkt.BGP_FSM_ACTIVE, st.DisconnectReason, st.DisconnectMessage)
}

// pollEvery is how often poll reads every session's state: GoBGP sends
// no event for a session that fails before OPENCONFIRM (a wrong ASN, a
// bad password), which only the peer list shows.
var pollEvery = 5 * time.Second

// poll reads the sessions' states until ctx ends.
func (sp *Speaker) poll(ctx context.Context) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var atLimit []*api.PeerState
		_ = sp.s.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
			st := p.GetState()
			if st.GetAdminState() == api.PeerState_ADMIN_STATE_PFX_CT {
				atLimit = append(atLimit, st)
				return
			}
			s := st.GetSessionState()
			up := s == api.PeerState_SESSION_STATE_ESTABLISHED
			idle := s == api.PeerState_SESSION_STATE_IDLE || s == api.PeerState_SESSION_STATE_ACTIVE
			reason, msg := st.GetDisconnectReason(), st.GetDisconnectMessage()
			// A session refused in its OPEN exchange leaves no reason,
			// only the NOTIFICATIONs it cost.
			sent := st.GetMessages().GetSent().GetNotification()
			recv := st.GetMessages().GetReceived().GetNotification()
			sp.mu.Lock()
			more := sp.sessions.notifications(st.GetNeighborAddress(), sent+recv)
			sp.mu.Unlock()
			if more && !up && !failure[reason] {
				reason = api.PeerState_DISCONNECT_REASON_NOTIFICATION_SENT
				msg = fmt.Sprintf("the OPEN exchange fails (%d NOTIFICATIONs sent, %d received: a wrong ASN or password on either side, or a peer that does not take this node; GoBGP's \"sent notification\" and \"received notification\" lines in this log give the codes)", sent, recv)
			}
			sp.observe(st.GetNeighborAddress(), st.GetPeerAsn(), up, idle, reason, msg)
		})
		sp.prefixLimited(ctx, atLimit)
	}
}

// observe takes a session's state, from an event or the peer list, and
// logs, reports and counts what changed. A reason is a failure's only
// when the session fell back to the start (idle) with a reason that is a
// fault: on the way up GoBGP gives the step ("open-msg-received").
func (sp *Speaker) observe(peer string, asn uint32, established, idle bool, reason api.PeerState_DisconnectReason, msg string) {
	why := ""
	if idle && failure[reason] {
		why = msg
	}
	sp.mu.Lock()
	change := sp.sessions.event(peer, established, why)
	stopping := sp.stopping
	sp.mu.Unlock()
	if stopping {
		return
	}
	switch change {
	case sessionUp:
		sp.metrics.setUp(peer, true)
		sp.log.Info("BGP session up", "peer", peer, "peerASN", asn)
	case sessionDown:
		sp.metrics.setUp(peer, false)
		sp.metrics.flap(peer)
		m := fmt.Sprintf("BGP session with %s (AS %d) went down: %s; the peer keeps this node's routes for %s (graceful restart) while vmlaned reconnects",
			peer, asn, orUnknown(msg), sp.cfg.RestartTime)
		sp.log.Warn(m)
		sp.report("VmlaneBGPSessionDown", m)
	case sessionRefused:
		sp.metrics.refused(peer)
		m := fmt.Sprintf("BGP peer %s (AS %d) does not establish a session: %s", peer, asn, why)
		sp.log.Warn(m)
		sp.report("VmlaneBGPPeerRefused", m)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// failure are the reasons a session ends that are a fault: not the idle
// timer of a session being set up, an administrative stop or a graceful
// restart.
var failure = map[api.PeerState_DisconnectReason]bool{
	api.PeerState_DISCONNECT_REASON_NOTIFICATION_SENT:     true,
	api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED: true,
	api.PeerState_DISCONNECT_REASON_BAD_PEER_AS:           true,
	api.PeerState_DISCONNECT_REASON_HOLD_TIMER_EXPIRED:    true,
	api.PeerState_DISCONNECT_REASON_READ_FAILED:           true,
	api.PeerState_DISCONNECT_REASON_WRITE_FAILED:          true,
	api.PeerState_DISCONNECT_REASON_INVALID_MSG:           true,
	api.PeerState_DISCONNECT_REASON_HARD_RESET:            true,
}

// Session changes worth a log line, an Event and a count.
const (
	sessionNoChange = iota
	sessionUp
	sessionDown
	// sessionRefused is a session that fails before it is established,
	// for a new reason: a wrong ASN, a bad password, a closed port.
	sessionRefused
)

// sessions is each peer's session state, as its events arrive.
type sessions struct {
	up     map[string]bool
	why    map[string]string // the last reason a session failed before it was up
	notifs map[string]uint64 // NOTIFICATIONs sent and received so far
}

// notifications records n, the NOTIFICATIONs of peer's sessions so far,
// and reports whether there are more than last time.
func (s *sessions) notifications(peer string, n uint64) bool {
	if s.notifs == nil {
		s.notifs = map[string]uint64{}
	}
	more := n > s.notifs[peer]
	s.notifs[peer] = n
	return more
}

// event takes a state change of peer's session and returns what it means.
func (s *sessions) event(peer string, established bool, why string) int {
	was := s.up[peer]
	s.up[peer] = established
	switch {
	case established && !was:
		delete(s.why, peer)
		return sessionUp
	case !established && was:
		return sessionDown
	case !established && why != "" && (why != s.why[peer] || strings.Contains(why, "NOTIFICATIONs")):
		s.why[peer] = why
		return sessionRefused
	}
	return sessionNoChange
}

// nextHop is the next hop of p: the node's address of p's family.
func nextHop(c Config, p netip.Prefix) netip.Addr {
	if p.Addr().Is4() {
		return c.NextHop4
	}
	return c.NextHop6
}

func familyName(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// pathFor is p's path: origin IGP, and the next hop in NEXT_HOP (IPv4) or
// in MP_REACH_NLRI (IPv6, RFC 4760), which GoBGP wants spelled out.
func pathFor(p netip.Prefix, nh netip.Addr) (*apiutil.Path, error) {
	nlri, err := bgppkt.NewIPAddrPrefix(p)
	if err != nil {
		return nil, err
	}
	attrs := []bgppkt.PathAttributeInterface{bgppkt.NewPathAttributeOrigin(bgppkt.BGP_ORIGIN_ATTR_TYPE_IGP)}
	family := bgppkt.RF_IPv4_UC
	if p.Addr().Is4() {
		a, err := bgppkt.NewPathAttributeNextHop(nh)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, a)
	} else {
		family = bgppkt.RF_IPv6_UC
		a, err := bgppkt.NewPathAttributeMpReachNLRI(family, []bgppkt.PathNLRI{{NLRI: nlri}}, nh)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, a)
	}
	if !nh.IsValid() {
		return nil, errors.New("no next hop")
	}
	return &apiutil.Path{Family: family, Nlri: nlri, Attrs: attrs}, nil
}
