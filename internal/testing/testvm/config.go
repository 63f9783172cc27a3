package testvm

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Mode is how the guest configures its NIC.
type Mode string

// The modes guest/init understands (vmlane.mode=).
const (
	// ModeStatic sets Config.IP and a default route via Config.Gateway.
	ModeStatic Mode = "static"
	// ModeDHCP runs busybox udhcpc and applies the lease, honouring
	// option 121 over option 3 as RFC 3442 requires.
	ModeDHCP Mode = "dhcp"
)

// Defaults applied by [Guest.Start] to zero fields of a [Config].
const (
	DefaultMemory    = "128M"
	DefaultTimeout   = 2 * time.Minute
	DefaultPingCount = 3
)

// netnsDir is where `ip netns add` pins named namespaces.
const netnsDir = "/var/run/netns"

// Config describes one guest run.
type Config struct {
	// NetNS is the network namespace QEMU runs in, where Tap lives: a name
	// as given to `ip netns add`, or a path such as /var/run/netns/NAME or
	// /proc/PID/ns/net. Empty means the caller's own namespace.
	NetNS string
	// Tap is the existing TAP device QEMU attaches the guest's NIC to.
	Tap string
	// MAC is the guest NIC's address. Empty picks a random locally
	// administered one; [VM.Config] reports it.
	MAC string
	// More are more NICs, each on its TAP in NetNS, which the guest
	// configures by DHCP after the first (ModeDHCP only): a VM with a
	// NIC on each of several networks. Result.Nets and Result.Leases
	// report them.
	More []NIC
	// Mode is ModeStatic (the default) or ModeDHCP.
	Mode Mode
	// IPv6, with ModeDHCP, also gets an IPv6 address by DHCPv6 (busybox
	// udhcpc6) and the default route from router advertisements
	// (Result.Net6, Result.DHCP6).
	IPv6 bool
	// IP is the static address in CIDR form, e.g. 10.1.2.3/24.
	IP string
	// Gateway is the static default gateway. Empty sets no default route.
	Gateway string
	// Ping lists the addresses the guest pings once configured. Empty
	// pings the gateway (static) or the router the lease named (dhcp).
	Ping []string
	// PingCount is the number of echo requests per target (default 3).
	PingCount int
	// Fetch lists http:// URLs the guest GETs once, after its pings, each
	// reported in Result.Fetches: how a test sees what a guest reaches
	// through a pod's network (a Service's ClusterIP, which answers no
	// ping) where no command can be sent to it (a guest in a pod, whose
	// console is the container's log). A URL is printable ASCII without
	// spaces or commas (the command line's separators).
	Fetch []string
	// Hold keeps the guest running after its pings, answering pings from
	// others, serving http://IP/cgi-bin/whoami and taking commands
	// ([VM.Ping], [VM.Fetch]), until [VM.Stop] or the context or Timeout
	// ends it.
	Hold bool
	// Timeout bounds the whole run, Hold or not (default 2 minutes).
	Timeout time.Duration
	// Memory is QEMU's -m argument (default 128M).
	Memory string
	// QMP, when set, is the path of a unix socket where QEMU serves its
	// machine protocol monitor (QMP), for a live migration's commands.
	QMP string
	// Incoming, when set, is the path of a unix socket where QEMU waits
	// for a live migration's stream instead of booting the guest: the
	// target of a migration, whose guest is the one the stream brings,
	// with the source's Hold, so a Hold target takes commands at once.
	// Its Result reports only what the guest prints after it arrived.
	Incoming string
}

// NIC is one of Config.More: the TAP it is attached to and its MAC (empty
// picks a random one).
type NIC struct {
	Tap, MAC string
}

// withDefaults returns c with zero fields filled in and checks it. Every
// value that ends up on the kernel command line is parsed here, so none can
// smuggle in a space or another vmlane.* option.
func (c Config) withDefaults() (Config, error) {
	if c.Mode == "" {
		c.Mode = ModeStatic
	}
	if c.PingCount == 0 {
		c.PingCount = DefaultPingCount
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Memory == "" {
		c.Memory = DefaultMemory
	}
	if c.MAC == "" {
		mac, err := randomMAC()
		if err != nil {
			return c, err
		}
		c.MAC = mac
	}

	var errs []error
	if c.Tap == "" {
		errs = append(errs, errors.New("no tap device"))
	} else if strings.ContainsAny(c.Tap, ", /=") || len(c.Tap) >= 16 {
		errs = append(errs, fmt.Errorf("bad tap device name %q", c.Tap))
	}
	if hw, err := net.ParseMAC(c.MAC); err != nil || len(hw) != 6 {
		errs = append(errs, fmt.Errorf("bad mac %q", c.MAC))
	} else {
		c.MAC = hw.String() // lower case, as the guest's sysfs spells it
	}
	c.More = slices.Clone(c.More)
	for i, n := range c.More {
		if c.Mode != ModeDHCP {
			errs = append(errs, fmt.Errorf("more NICs need dhcp mode, got %q", c.Mode))
			break
		}
		if n.MAC == "" {
			mac, err := randomMAC()
			if err != nil {
				return c, err
			}
			n.MAC = mac
		}
		if n.Tap == "" || strings.ContainsAny(n.Tap, ", /=") || len(n.Tap) >= 16 {
			errs = append(errs, fmt.Errorf("bad tap device name %q", n.Tap))
		}
		if hw, err := net.ParseMAC(n.MAC); err != nil || len(hw) != 6 {
			errs = append(errs, fmt.Errorf("bad mac %q", n.MAC))
		} else {
			n.MAC = hw.String()
		}
		c.More[i] = n
	}
	switch c.Mode {
	case ModeStatic:
		if _, err := netip.ParsePrefix(c.IP); err != nil {
			errs = append(errs, fmt.Errorf("static mode needs ip in CIDR form: %w", err))
		}
	case ModeDHCP:
		if c.IP != "" {
			errs = append(errs, fmt.Errorf("dhcp mode takes no ip, got %q", c.IP))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown mode %q", c.Mode))
	}
	if c.IPv6 && c.Mode != ModeDHCP {
		errs = append(errs, fmt.Errorf("IPv6 needs dhcp mode, got %q", c.Mode))
	}
	if c.Gateway != "" {
		if _, err := netip.ParseAddr(c.Gateway); err != nil {
			errs = append(errs, fmt.Errorf("bad gateway: %w", err))
		}
	}
	for _, p := range c.Ping {
		if _, err := netip.ParseAddr(p); err != nil {
			errs = append(errs, fmt.Errorf("bad ping target: %w", err))
		}
	}
	for _, u := range c.Fetch {
		if err := checkBootURL(u); err != nil {
			errs = append(errs, err)
		}
	}
	if c.PingCount < 0 {
		errs = append(errs, fmt.Errorf("negative ping count %d", c.PingCount))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("negative timeout %v", c.Timeout))
	}
	for _, sock := range []struct{ what, path string }{{"qmp", c.QMP}, {"incoming", c.Incoming}} {
		// QEMU reads the path inside an option list: a comma would end it.
		if sock.path != "" && (!filepath.IsAbs(sock.path) || strings.ContainsAny(sock.path, ", ")) {
			errs = append(errs, fmt.Errorf("bad %s socket path %q: want an absolute path without commas or spaces", sock.what, sock.path))
		}
	}
	if c.Incoming != "" && !c.Hold {
		errs = append(errs, errors.New("an incoming guest must be a Hold guest (only held guests migrate)"))
	}
	if strings.ContainsAny(c.Memory, " ,") {
		errs = append(errs, fmt.Errorf("bad memory size %q", c.Memory))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("testvm: config: %w", err)
	}
	return c, nil
}

// checkBootURL checks a Config.Fetch URL: it goes on the kernel command
// line, where a space would end it and a comma split it, and into a
// console report, where it must stay one word.
func checkBootURL(u string) error {
	if !goodURL(u, `,"'`) {
		return fmt.Errorf("bad fetch URL %q: want an http:// URL of printable ASCII without spaces, commas or quotes, at most %d bytes", u, maxURL)
	}
	return nil
}

// goodURL reports whether u is an http:// URL of printable ASCII without
// spaces or any of forbid, at most maxURL bytes: what the guest's console
// commands (VM.Fetch) and command line (Config.Fetch) can carry.
func goodURL(u, forbid string) bool {
	rest, ok := strings.CutPrefix(u, "http://")
	return ok && rest != "" && len(u) <= maxURL &&
		strings.IndexFunc(u, func(r rune) bool { return r <= ' ' || r > '~' || strings.ContainsRune(forbid, r) }) < 0
}

// randomMAC returns a random unicast, locally administered MAC address.
func randomMAC() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("testvm: random mac: %w", err)
	}
	b[0] = b[0]&^0x01 | 0x02 // unicast, locally administered
	return net.HardwareAddr(b).String(), nil
}

// kernelCmdline is the -append string for c, which must have been through
// withDefaults.
func (c Config) kernelCmdline() string {
	// quiet loglevel=1 keeps the console to our VMLANE-* lines; panic=-1
	// with QEMU's -no-reboot turns a dying /init into a prompt exit rather
	// than a hang until Timeout.
	args := []string{
		"console=ttyS0", "quiet", "loglevel=1", "panic=-1",
		"vmlane.mode=" + string(c.Mode),
		"vmlane.mac=" + c.MAC,
		"vmlane.pingcount=" + strconv.Itoa(c.PingCount),
	}
	if c.IP != "" {
		args = append(args, "vmlane.ip="+c.IP)
	}
	if c.Gateway != "" {
		args = append(args, "vmlane.gw="+c.Gateway)
	}
	if len(c.Ping) > 0 {
		args = append(args, "vmlane.ping="+strings.Join(c.Ping, ","))
	}
	if c.Hold {
		args = append(args, "vmlane.hold=1")
	}
	if c.IPv6 {
		args = append(args, "vmlane.ip6=dhcp")
	}
	if len(c.Fetch) > 0 {
		args = append(args, "vmlane.fetch="+strings.Join(c.Fetch, ","))
	}
	if len(c.More) > 0 {
		macs := make([]string, len(c.More))
		for i, n := range c.More {
			macs[i] = n.MAC
		}
		args = append(args, "vmlane.more="+strings.Join(macs, ","))
	}
	return strings.Join(args, " ")
}

// netnsPath resolves Config.NetNS to a namespace file, "" for none.
func netnsPath(ns string) string {
	if ns == "" || strings.Contains(ns, "/") {
		return ns
	}
	return filepath.Join(netnsDir, ns)
}

// command is the argv that runs the guest for c, which must have been
// through withDefaults.
func (g Guest) command(c Config) []string {
	var argv []string
	if ns := netnsPath(c.NetNS); ns != "" {
		// nsenter rather than `ip netns exec`: it takes a path as well as a
		// name, and it execs QEMU in place, so the PID we kill is QEMU's.
		argv = append(argv, "nsenter", "--net="+ns, "--")
	}
	argv = append(argv,
		"qemu-system-x86_64",
		"-accel", "tcg",
		"-machine", "pc",
		"-m", c.Memory,
		"-nodefaults", "-no-user-config",
		// -display none plus one explicit stdio chardev rather than
		// -nographic, which would multiplex a monitor onto stdout too.
		// signal=off: a ^C for the test binary is not QEMU's business.
		"-display", "none",
		"-chardev", "stdio,id=con0,signal=off",
		"-serial", "chardev:con0",
		"-kernel", g.Kernel,
		"-initrd", g.Initrd,
		"-append", c.kernelCmdline(),
		"-netdev", "tap,id=n0,ifname="+c.Tap+",script=no,downscript=no,vhost=off",
		// romfile= skips the iPXE option ROM: nothing boots from the network.
		"-device", "virtio-net-pci,netdev=n0,mac="+c.MAC+",romfile=",
	)
	for i, n := range c.More {
		id := "n" + strconv.Itoa(i+1)
		argv = append(argv,
			"-netdev", "tap,id="+id+",ifname="+n.Tap+",script=no,downscript=no,vhost=off",
			"-device", "virtio-net-pci,netdev="+id+",mac="+n.MAC+",romfile=")
	}
	if c.QMP != "" {
		argv = append(argv, "-qmp", "unix:"+c.QMP+",server=on,wait=off")
	}
	if c.Incoming != "" {
		argv = append(argv, "-incoming", "unix:"+c.Incoming)
	}
	// Power-off and reboot (and, with panic=-1, a panic) end QEMU.
	return append(argv, "-no-reboot")
}

// Command returns the argv that runs the guest for c, as [Guest.Start]
// would run it, for a caller that starts QEMU itself: the e2e suite's VM
// pods run it as their container's command, in the pod's own network
// namespace (leave c.NetNS empty there). The guest's console is QEMU's
// stdout, so its VMLANE-* lines are the container's log.
func (g Guest) Command(c Config) ([]string, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	return g.command(c), nil
}
