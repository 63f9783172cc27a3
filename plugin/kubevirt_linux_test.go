package plugin_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmlane/vmlane/internal/testing/netnstest"
)

// TestMain runs the test binary as openTap when a test asks it to (see
// openTapAs); otherwise it runs the tests.
func TestMain(m *testing.M) {
	if spec := os.Getenv(openTapEnv); spec != "" {
		os.Exit(openTap(spec, os.Stdout))
	}
	os.Exit(m.Run())
}

const openTapEnv = "VMLANE_TEST_OPEN_TAP"

// openTap opens the TAP spec names ("NAME,QUEUES,TUN") the way libvirt opens
// the TAP of a KubeVirt interface whose target is managed='no': one
// /dev/net/tun descriptor per queue, each with TUNSETIFF of IFF_TAP,
// IFF_NO_PI, IFF_VNET_HDR and, for more than one queue, IFF_MULTI_QUEUE
// (libvirt src/util/virnetdevtap.c virNetDevTapCreate, whose flags
// KubeVirt's cmd/virt-chroot/tap-device-maker.go createTapDevice copies
// for the TAPs it makes itself). TUN is the path of the tun device
// (/dev/net/tun). It prints "ok" or the error.
func openTap(spec string, out io.Writer) int {
	f := strings.Split(spec, ",")
	if len(f) != 3 {
		fmt.Fprintf(out, "bad spec %q\n", spec)
		return 2
	}
	name, tun := f[0], f[2]
	queues, err := strconv.Atoi(f[1])
	if err != nil || queues < 1 {
		fmt.Fprintf(out, "bad spec %q\n", spec)
		return 2
	}
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if queues > 1 {
		flags |= unix.IFF_MULTI_QUEUE
	}
	for range queues {
		fd, err := unix.Open(tun, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintln(out, err)
			return 1
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			fmt.Fprintln(out, err)
			return 1
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			fmt.Fprintln(out, "TUNSETIFF:", err)
			return 1
		}
	}
	fmt.Fprintln(out, "ok")
	return 0
}

// openTapAs runs openTap in pod as uid:gid, without capabilities (a
// change of uid from 0 drops them) or supplementary groups, as KubeVirt's
// virt-launcher runs QEMU (107:107). It returns openTap's line.
func openTapAs(t *testing.T, pod *netnstest.NS, uid, gid int, tap string, queues int) string {
	t.Helper()
	// The test binary, where that user may run it.
	dir, err := os.MkdirTemp("", "vmlane-opentap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "opentap")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	// A tun device node anyone may open, as on a node (and in
	// virt-launcher, which gets it from KubeVirt's device plugin), where
	// this machine's own /dev/net/tun may be root's only.
	tun := filepath.Join(dir, "tun")
	if err := unix.Mknod(tun, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil {
		t.Fatalf("making a tun device node: %v", err)
	}
	if err := os.Chmod(tun, 0o666); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net="+pod.Path, "-S", strconv.Itoa(uid), "-G", strconv.Itoa(gid), "--", bin)
	cmd.Env = []string{openTapEnv + "=" + tap + "," + strconv.Itoa(queues) + "," + tun}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running the TAP opener: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// sysNet reads /sys/class/net/LINK/ATTR in pod.
func sysNet(t *testing.T, pod *netnstest.NS, link, attr string) string {
	t.Helper()
	return strings.TrimSpace(pod.MustRun(t, "cat", "/sys/class/net/"+link+"/"+attr))
}

// TestKubeVirtTapBinding is what KubeVirt's tap domain attachment (a
// network binding plugin with domainAttachmentType: tap) expects of the
// TAP the CNI plugin makes, from a reading of KubeVirt d923fdb:
//   - pkg/network/domainspec/generators.go TapLibvirtSpecGenerator:
//     the target is the TAP link.GenerateTapDeviceName names, with
//     managed='no' (libvirt opens it, creates nothing); when no such link
//     exists the pod interface itself is the target. The guest's MAC is
//     the VMI spec's, else the pod interface's; its MTU the pod
//     interface's.
//   - pkg/network/link/names.go GenerateTapDeviceName: tap0 for the pod
//     network, "tap" + the pod interface name after its 3rd byte for a
//     Multus network (pod<hash> → tap<hash>, net1 → tap1).
//   - QEMU runs as 107:107 without CAP_NET_ADMIN, with one queue per vCPU
//     when the VMI asks for networkInterfaceMultiqueue.
func TestKubeVirtTapBinding(t *testing.T) {
	n := newNode(t, "10.250.44.0/24")
	pod := netnstest.New(t, "virt-launcher")
	list := n.conf("1.1.0", true, map[string]any{"tapOwner": 107, "tapGroup": 107, "podMAC": "guest"})
	rt := podRT("kv1", pod)
	r, err := n.add(list, rt)
	if err != nil {
		t.Fatal(err)
	}
	tap := lastIf(r)
	if tap.Name != "tap0" {
		t.Fatalf("TAP %q, want tap0 (KubeVirt's name for the pod network's)", tap.Name)
	}
	if got := sysNet(t, pod, "tap0", "owner") + ":" + sysNet(t, pod, "tap0", "group"); got != "107:107" {
		t.Errorf("tap0 owned by %s, want 107:107", got)
	}
	flags, err := strconv.ParseUint(strings.TrimPrefix(sysNet(t, pod, "tap0", "tun_flags"), "0x"), 16, 32)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_PERSIST); flags&^unix.IFF_ONE_QUEUE != want {
		t.Errorf("tap0's tun_flags %#x, want %#x (a one-queue TAP)", flags, want)
	}
	// KubeVirt gives the guest eth0's MAC and MTU: they must be the
	// lease's, for vmlaned's DHCP to hand the guest its address.
	if mac := sysNet(t, pod, "eth0", "address"); mac != tap.Mac {
		t.Errorf("eth0's MAC %s, the guest's (the lease's) %s", mac, tap.Mac)
	}
	if mtu := sysNet(t, pod, "eth0", "mtu"); mtu != strconv.Itoa(tap.Mtu) {
		t.Errorf("eth0's MTU %s, the TAP's %d", mtu, tap.Mtu)
	}
	if ls := n.leaseList(); len(ls) != 1 || ls[0].MAC != tap.Mac {
		t.Errorf("leases %+v, want one for %s", ls, tap.Mac)
	}
	if err := n.check(list, rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}

	if got := openTapAs(t, pod, 107, 107, "tap0", 1); got != "ok" {
		t.Errorf("QEMU's user 107 opening tap0: %s", got)
	}
	if got := openTapAs(t, pod, 108, 108, "tap0", 1); !strings.Contains(got, "operation not permitted") {
		t.Errorf("another user opening tap0: %q, want EPERM", got)
	}
	if got := openTapAs(t, pod, 107, 107, "tap0", 2); !strings.Contains(got, "invalid argument") {
		t.Errorf("two queues of a one-queue TAP: %q, want EINVAL (tapMultiQueue must match the VMI's networkInterfaceMultiqueue)", got)
	}
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	n.assertClean(pod)
}

// TestKubeVirtTapBindingMultiQueue is a VMI with
// networkInterfaceMultiqueue on a secondary network: KubeVirt's hashed
// pod interface name (pkg/network/namescheme: "pod" + a hash of the
// network's name) gives the TAP's, and QEMU opens one queue per vCPU.
func TestKubeVirtTapBindingMultiQueue(t *testing.T) {
	n := newNode(t, "10.250.45.0/24")
	pod := netnstest.New(t, "virt-launcher")
	list := n.conf("1.1.0", true, map[string]any{"tapOwner": "107", "tapGroup": 107, "tapMultiQueue": true})
	rt := multusRT("kv2", pod, "pod16477688c0e")
	r, err := n.add(list, rt)
	if err != nil {
		t.Fatal(err)
	}
	if tap := lastIf(r); tap.Name != "tap16477688c0e" {
		t.Fatalf("TAP %q, want tap16477688c0e", tap.Name)
	}
	flags := sysNet(t, pod, "tap16477688c0e", "tun_flags")
	if f, err := strconv.ParseUint(strings.TrimPrefix(flags, "0x"), 16, 32); err != nil || f&unix.IFF_MULTI_QUEUE == 0 {
		t.Errorf("tun_flags %s: want IFF_MULTI_QUEUE", flags)
	}
	if got := openTapAs(t, pod, 107, 107, "tap16477688c0e", 4); got != "ok" {
		t.Errorf("QEMU's user opening 4 queues: %s", got)
	}
	if err := n.del(list, rt); err != nil {
		t.Fatal(err)
	}
	n.assertClean(pod)
}
