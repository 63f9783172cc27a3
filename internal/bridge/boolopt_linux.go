package bridge

import (
	"errors"
	"fmt"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The bridge's boolean options (linux/if_bridge.h, Linux 5.1): a
// struct br_boolopt_multi {optval, optmask} in IFLA_BR_MULTI_BOOLOPT.
// vishvananda/netlink neither reads nor writes it.
const (
	iflaBrMultiBoolopt = 46 // IFLA_BR_MULTI_BOOLOPT, linux/if_link.h
	// brBooloptNoLLLearn is BR_BOOLOPT_NO_LL_LEARN: the bridge does not
	// learn the source MAC of frames to the 802.1D link-local group
	// addresses (01:80:c2:00:00:0X), which it handles outside its
	// netfilter prerouting hook, so anti-spoofing's bridge table never
	// sees them.
	brBooloptNoLLLearn = 0
)

// ErrNoBoolopt means the kernel does not report the bridge's boolean
// options: it is older than Linux 5.1, which added no_linklocal_learn.
var ErrNoBoolopt = errors.New("the kernel has no bridge option no_linklocal_learn (Linux 5.1 or later): a pod could put a neighbour's MAC on its own port through a link-local frame")

// noLinkLocalLearn reads the bridge's no_linklocal_learn option.
func noLinkLocalLearn(index int) (bool, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return false, fmt.Errorf("reading the bridge's options: %w", err)
	}
	for _, m := range msgs {
		if len(m) < unix.SizeofIfInfomsg {
			continue
		}
		if v, ok := linkInfoData(m[unix.SizeofIfInfomsg:], iflaBrMultiBoolopt); ok && len(v) >= 4 {
			return nl.NativeEndian().Uint32(v[0:4])&(1<<brBooloptNoLLLearn) != 0, nil
		}
	}
	return false, ErrNoBoolopt
}

// linkInfoData finds attribute typ in IFLA_LINKINFO's IFLA_INFO_DATA of a
// link message's attributes.
func linkInfoData(b []byte, typ uint16) ([]byte, bool) {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return nil, false
	}
	for _, a := range attrs {
		if a.Attr.Type&nl.NLA_TYPE_MASK != unix.IFLA_LINKINFO {
			continue
		}
		info, err := nl.ParseRouteAttr(a.Value)
		if err != nil {
			return nil, false
		}
		for _, i := range info {
			if i.Attr.Type&nl.NLA_TYPE_MASK != nl.IFLA_INFO_DATA {
				continue
			}
			data, err := nl.ParseRouteAttr(i.Value)
			if err != nil {
				return nil, false
			}
			for _, d := range data {
				if d.Attr.Type&nl.NLA_TYPE_MASK == typ {
					return d.Value, true
				}
			}
		}
	}
	return nil, false
}

// setNoLinkLocalLearn turns the bridge's no_linklocal_learn on, leaving its
// other boolean options as they are (the mask names only this one).
func setNoLinkLocalLearn(index int) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("bridge"))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	opt := make([]byte, 8)
	nl.NativeEndian().PutUint32(opt[0:], 1<<brBooloptNoLLLearn)
	nl.NativeEndian().PutUint32(opt[4:], 1<<brBooloptNoLLLearn)
	data.AddRtAttr(iflaBrMultiBoolopt, opt)
	req.AddData(info)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("setting the bridge's no_linklocal_learn: %w", err)
	}
	return nil
}

// EnsureNoLinkLocalLearn makes the bridge name keep the source MACs of
// link-local frames out of its forwarding database, and reports whether it
// had to (someone turned the option off, or the bridge is new). On a
// kernel without the option it returns ErrNoBoolopt.
func EnsureNoLinkLocalLearn(name string) (changed bool, err error) {
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return false, err
	}
	if _, ok := l.(*netlink.Bridge); !ok {
		return false, &NotBridgeError{Name: name, Type: l.Type()}
	}
	return ensureNoLinkLocalLearn(l.Attrs().Index)
}

func ensureNoLinkLocalLearn(index int) (changed bool, err error) {
	on, err := noLinkLocalLearn(index)
	if err != nil || on {
		return false, err
	}
	if err := setNoLinkLocalLearn(index); err != nil {
		return false, err
	}
	return true, nil
}
