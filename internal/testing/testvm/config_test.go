package testvm

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{Tap: "tap0", IP: "10.1.2.3/24"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != ModeStatic || c.PingCount != 3 || c.Timeout != 2*time.Minute || c.Memory != "128M" {
		t.Errorf("defaults: %+v", c)
	}
	hw, err := net.ParseMAC(c.MAC)
	if err != nil || hw[0]&0x01 != 0 || hw[0]&0x02 == 0 {
		t.Errorf("random MAC %q: want a unicast, locally administered address (%v)", c.MAC, err)
	}

	c, err = Config{Tap: "tap0", Mode: ModeDHCP, MAC: "52:54:00:AB:CD:EF"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.MAC != "52:54:00:ab:cd:ef" {
		t.Errorf("MAC %q, want it in lower case as the guest's sysfs shows it", c.MAC)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no tap", Config{IP: "10.0.0.2/24"}, "no tap device"},
		{"tap smuggling an option", Config{Tap: "tap0,vhost=on", IP: "10.0.0.2/24"}, "bad tap device name"},
		{"static without ip", Config{Tap: "tap0"}, "static mode needs ip"},
		{"static ip without prefix", Config{Tap: "tap0", IP: "10.0.0.2"}, "static mode needs ip"},
		{"dhcp with ip", Config{Tap: "tap0", Mode: ModeDHCP, IP: "10.0.0.2/24"}, "dhcp mode takes no ip"},
		{"unknown mode", Config{Tap: "tap0", Mode: "bootp"}, `unknown mode "bootp"`},
		{"bad mac", Config{Tap: "tap0", Mode: ModeDHCP, MAC: "52:54:00:12:34"}, "bad mac"},
		{"long mac", Config{Tap: "tap0", Mode: ModeDHCP, MAC: "00:00:00:00:fe:80:00:00"}, "bad mac"},
		{"gateway smuggling an option", Config{Tap: "tap0", IP: "10.0.0.2/24", Gateway: "10.0.0.1 vmlane.hold=1"}, "bad gateway"},
		{"bad ping target", Config{Tap: "tap0", IP: "10.0.0.2/24", Ping: []string{"10.0.0.1,10.0.0.3"}}, "bad ping target"},
		{"fetch URL smuggling an option", Config{Tap: "tap0", Mode: ModeDHCP, Fetch: []string{"http://x/ vmlane.hold=1"}}, "bad fetch URL"},
		{"fetch URL splitting the list", Config{Tap: "tap0", Mode: ModeDHCP, Fetch: []string{"http://x/a,b"}}, "bad fetch URL"},
		{"fetch URL not http", Config{Tap: "tap0", Mode: ModeDHCP, Fetch: []string{"https://x/"}}, "bad fetch URL"},
		{"negative timeout", Config{Tap: "tap0", IP: "10.0.0.2/24", Timeout: -time.Second}, "negative timeout"},
		{"ipv6 in static mode", Config{Tap: "tap0", IP: "10.0.0.2/24", IPv6: true}, "IPv6 needs dhcp mode"},
		{"qmp path smuggling an option", Config{Tap: "tap0", IP: "10.0.0.2/24", QMP: "/run/q.sock,server=off"}, "bad qmp socket path"},
		{"relative incoming path", Config{Tap: "tap0", Mode: ModeDHCP, Hold: true, Incoming: "in.sock"}, "bad incoming socket path"},
		{"incoming without hold", Config{Tap: "tap0", Mode: ModeDHCP, Incoming: "/run/in.sock"}, "must be a Hold guest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.cfg.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("withDefaults() error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	g := Guest{Kernel: "/c/vmlinux", Initrd: "/c/initrd.img"}
	qemu := func(appendArg string) []string {
		return []string{
			"qemu-system-x86_64", "-accel", "tcg", "-machine", "pc", "-m", "128M",
			"-nodefaults", "-no-user-config", "-display", "none",
			"-chardev", "stdio,id=con0,signal=off", "-serial", "chardev:con0",
			"-kernel", "/c/vmlinux", "-initrd", "/c/initrd.img",
			"-append", appendArg,
			"-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no,vhost=off",
			"-device", "virtio-net-pci,netdev=n0,mac=52:54:00:00:00:02,romfile=",
			"-no-reboot",
		}
	}
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{
			name: "static in a named namespace",
			cfg: Config{NetNS: "vmlane-tvm-1", Tap: "tap0", MAC: "52:54:00:00:00:02",
				IP: "10.99.0.2/24", Gateway: "10.99.0.1"},
			want: append([]string{"nsenter", "--net=/var/run/netns/vmlane-tvm-1", "--"},
				qemu("console=ttyS0 quiet loglevel=1 panic=-1 vmlane.mode=static vmlane.mac=52:54:00:00:00:02 "+
					"vmlane.pingcount=3 vmlane.ip=10.99.0.2/24 vmlane.gw=10.99.0.1")...),
		},
		{
			name: "held dhcp guest in a namespace given by path",
			cfg: Config{NetNS: "/proc/42/ns/net", Tap: "tap0", MAC: "52:54:00:00:00:02",
				Mode: ModeDHCP, Ping: []string{"10.99.0.1", "10.99.0.3"}, PingCount: 1, Hold: true},
			want: append([]string{"nsenter", "--net=/proc/42/ns/net", "--"},
				qemu("console=ttyS0 quiet loglevel=1 panic=-1 vmlane.mode=dhcp vmlane.mac=52:54:00:00:00:02 "+
					"vmlane.pingcount=1 vmlane.ping=10.99.0.1,10.99.0.3 vmlane.hold=1")...),
		},
		{
			name: "boot-time fetches",
			cfg: Config{Tap: "tap0", MAC: "52:54:00:00:00:02", Mode: ModeDHCP,
				Fetch: []string{"http://10.96.0.10/cgi-bin/whoserves", "http://10.96.0.11:8080/x?a=b"}},
			want: qemu("console=ttyS0 quiet loglevel=1 panic=-1 vmlane.mode=dhcp vmlane.mac=52:54:00:00:00:02 " +
				"vmlane.pingcount=3 vmlane.fetch=http://10.96.0.10/cgi-bin/whoserves,http://10.96.0.11:8080/x?a=b"),
		},
		{
			name: "migration target with a monitor",
			cfg: Config{Tap: "tap0", MAC: "52:54:00:00:00:02", Mode: ModeDHCP, Hold: true,
				QMP: "/run/m/vm-2.qmp", Incoming: "/run/m/vm-2.in"},
			want: append(qemu("console=ttyS0 quiet loglevel=1 panic=-1 vmlane.mode=dhcp vmlane.mac=52:54:00:00:00:02 " +
				"vmlane.pingcount=3 vmlane.hold=1")[:len(qemu(""))-1],
				"-qmp", "unix:/run/m/vm-2.qmp,server=on,wait=off", "-incoming", "unix:/run/m/vm-2.in", "-no-reboot"),
		},
		{
			name: "own namespace",
			cfg:  Config{Tap: "tap0", MAC: "52:54:00:00:00:02", IP: "10.99.0.2/24"},
			want: qemu("console=ttyS0 quiet loglevel=1 panic=-1 vmlane.mode=static vmlane.mac=52:54:00:00:00:02 " +
				"vmlane.pingcount=3 vmlane.ip=10.99.0.2/24"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := tt.cfg.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			if got := g.command(cfg); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("command:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestFind(t *testing.T) {
	t.Setenv(EnvGuestDir, "")
	_, err := Find()
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), EnvGuestDir) || !strings.Contains(err.Error(), "make guest") {
		t.Errorf("Find() with %s unset: %v; want ErrNotBuilt naming the variable and `make guest`", EnvGuestDir, err)
	}

	dir := t.TempDir()
	t.Setenv(EnvGuestDir, dir)
	touch := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	touch("vmlinuz")
	touch("initrd.img")
	if _, err := Find(); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), ".stamp") {
		t.Errorf("Find() of a build without .stamp: %v; want ErrNotBuilt", err)
	}

	touch(".stamp")
	g, err := Find()
	want := Guest{Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.img")}
	if err != nil || g != want {
		t.Errorf("Find() = %+v, %v; want %+v", g, err, want)
	}

	touch("vmlinux")
	g, err = Find()
	want.Kernel = filepath.Join(dir, "vmlinux")
	if err != nil || g != want {
		t.Errorf("Find() with vmlinux = %+v, %v; want the ELF kernel %+v", g, err, want)
	}
}

func TestConfigMoreNICs(t *testing.T) {
	c, err := Config{Tap: "tap1", MAC: "52:54:00:00:00:01", Mode: ModeDHCP, More: []NIC{{Tap: "tap2", MAC: "52:54:00:00:00:0A"}}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(Guest{Kernel: "k", Initrd: "i"}.command(c), " ")
	for _, want := range []string{
		"-netdev tap,id=n0,ifname=tap1,", "-netdev tap,id=n1,ifname=tap2,script=no,downscript=no,vhost=off",
		"-device virtio-net-pci,netdev=n1,mac=52:54:00:00:00:0a,romfile=", "vmlane.more=52:54:00:00:00:0a",
	} {
		if !strings.Contains(argv, want) {
			t.Errorf("command %q lacks %q", argv, want)
		}
	}
	for _, bad := range []Config{
		{Tap: "tap1", IP: "10.0.0.2/24", More: []NIC{{Tap: "tap2"}}},
		{Tap: "tap1", Mode: ModeDHCP, More: []NIC{{Tap: "tap2,vhost=on"}}},
		{Tap: "tap1", Mode: ModeDHCP, More: []NIC{{Tap: "tap2", MAC: "52:54"}}},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("accepted %+v", bad.More)
		}
	}
}
