package pf

import (
	"fmt"
	"strings"
)

// HookAnchor is the main ruleset's anchor point vmlane's anchor hangs
// from: macOS's /etc/pf.conf has `nat-anchor "com.apple/*"`, and
// ValidAnchor keeps vmlane's anchor under com.apple/.
const HookAnchor = `nat-anchor "com.apple/*"`

// sharingAnchor is how the NAT of vmnet's shared mode (InternetSharing)
// shows in the main ruleset.
const sharingAnchor = "com.apple.internet-sharing"

// CheckHook reads the main ruleset's translation rules (`pfctl -s nat`)
// and says what keeps vmlane's anchor from being evaluated, nil when
// nothing does: the main ruleset must have HookAnchor, and before
// vmnet's internet-sharing NAT, whose first match would otherwise
// translate pod-to-pod traffic before vmlane's no-nat rules are reached.
// InternetSharing, and tools that load their own pf.conf, replace the
// main ruleset; the anchor's own rules read back fine all the while.
func CheckHook(mainNAT string) error {
	hook, sharing := -1, -1
	for i, line := range strings.Split(mainNAT, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case hook < 0 && (line == HookAnchor || strings.HasPrefix(line, HookAnchor+" ")):
			hook = i
		case sharing < 0 && strings.Contains(line, sharingAnchor):
			sharing = i
		}
	}
	switch {
	case hook < 0:
		return fmt.Errorf("pf's main ruleset has no %s (something loaded its own ruleset over /etc/pf.conf's): vmlane's no-nat rules are not evaluated, and pod-to-pod traffic is NATed; `sudo pfctl -f /etc/pf.conf` restores it", HookAnchor)
	case sharing >= 0 && sharing < hook:
		return fmt.Errorf("pf's main ruleset has vmnet's internet-sharing NAT before %s: pod-to-pod traffic is NATed before vmlane's no-nat rules are reached", HookAnchor)
	}
	return nil
}

// CheckHook reads the main ruleset with `pfctl -s nat` and checks it with
// CheckHook.
func (p *PF) CheckHook() error {
	out, err := p.run.Run("", "pfctl", "-s", "nat")
	if err != nil {
		return fmt.Errorf("reading pf's main ruleset: %w", err)
	}
	return CheckHook(out)
}
