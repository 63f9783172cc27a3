//go:build e2e

package realnode

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmlane/vmlane/e2e/cluster"
)

// TestClusterDNS: the cluster runs CoreDNS at the Service kube-dns; a pod
// resolves a Service by its full name and by its short one (the kubelet's
// search list), and a VM's guest gets the cluster DNS server and the same
// search list from vmlaned's DHCP (options 6 and 119), and on a dual-stack
// node the search list from DHCPv6 too (DOMAIN_LIST; DNS_SERVERS carries
// IPv6 servers only, and this cluster's Services are IPv4: its --dns has
// none, and dhcp's tests cover the option).
func TestClusterDNS(t *testing.T) {
	svc, err := c.Client.CoreV1().Services("default").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := web["node-c"][0]
	for _, name := range []string{"web.default.svc." + cluster.ClusterDomain, "web"} {
		cluster.WaitFor(t, time.Minute, src.Name+" resolves "+name+" to "+svc.Spec.ClusterIP, func() (bool, string) {
			// busybox nslookup tries every search domain and exits 1 when
			// any says NXDOMAIN, even as the right one answers.
			out, _ := c.Exec(src, "nslookup", name)
			return strings.Contains(out, "Address: "+svc.Spec.ClusterIP), out
		})
	}

	r, err := c.GuestReport("vm-a")
	if err != nil {
		t.Fatal(err)
	}
	dns := netip.MustParseAddr(cluster.ClusterDNS)
	if r.DHCP == nil || !slices.Contains(r.DHCP.DNS, dns) || !slices.Equal(r.DHCP.Search, cluster.ClusterDNSSearch) {
		t.Errorf("vm-a's DHCP lease %+v: want DNS %s and search %v", r.DHCP, dns, cluster.ClusterDNSSearch)
	}
	if c.DualStack() {
		if r.DHCP6 == nil || !slices.Equal(r.DHCP6.Search, cluster.ClusterDNSSearch) {
			t.Errorf("vm-a's DHCPv6 lease %+v: want search %v", r.DHCP6, cluster.ClusterDNSSearch)
		}
	}
}
