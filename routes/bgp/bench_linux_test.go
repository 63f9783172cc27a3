package bgp

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlane/vmlane/internal/bench/benchns"
	"github.com/vmlane/vmlane/internal/testing/birdtest"
	"github.com/vmlane/vmlane/internal/testing/netnstest"
	"github.com/vmlane/vmlane/internal/testing/privtest"
)

// BenchmarkAnnounceToBird measures how long Debian's bird2 takes to have
// 5,000 prefixes from vmlaned's speaker, from the session's establishment
// to the last prefix in its table, against the same 5,000 from a second
// bird (static routes, exported) in the same run; and the speaker
// process's resident memory once bird has them all.
func BenchmarkAnnounceToBird(b *testing.B) {
	privtest.Require(b, "bird", "birdc", "ip")
	rtr, spk := netnstest.New(b, "bgp-rtr"), netnstest.New(b, "bgp-spk")
	rtr.MustRun(b, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0s")
	rtr.MustRun(b, "ip", "link", "set", "eth0s", "netns", spk.Name)
	rtr.MustRun(b, "ip", "addr", "add", "10.77.0.1/24", "dev", "eth0")
	rtr.MustRun(b, "ip", "link", "set", "eth0", "up")
	spk.MustRun(b, "ip", "addr", "add", "10.77.0.2/24", "dev", "eth0s")
	spk.MustRun(b, "ip", "link", "set", "eth0s", "up")
	router := birdtest.Start(b, rtr, `
router id 10.77.0.1;
protocol device {}
protocol bgp peer { local as 64512; neighbor 10.77.0.2 as 64513; ipv4 { import all; export none; }; }
`)
	// untilAll waits for the session and then for every prefix, and
	// returns the time between.
	untilAll := func(what string) time.Duration {
		var up time.Time
		count := regexp.MustCompile(`(\d+) of \d+ routes`)
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if up.IsZero() {
				if o, _ := router.Birdc("show", "protocols", "peer"); strings.Contains(o, "Established") {
					up = time.Now()
				}
				continue
			}
			o, _ := router.Birdc("show", "route", "count")
			if m := count.FindStringSubmatch(o); m != nil {
				if n, _ := strconv.Atoi(m[1]); n >= benchPrefixes {
					return time.Since(up)
				}
			}
		}
		b.Fatalf("%s: bird did not get %d prefixes in 2 minutes", what, benchPrefixes)
		return 0
	}

	b.ResetTimer()
	// vmlaned's speaker, in a process of its own in the speaker's netns.
	sp := spk.Command(os.Args[0], "-test.run=^$")
	sp.Env = append(os.Environ(), speakerEnv+"=1")
	stdin, err := sp.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	sp.Stderr = os.Stderr
	sp.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := sp.Start(); err != nil {
		b.Fatal(err)
	}
	speaker := untilAll("vmlaned's speaker")
	rss, _, err := benchns.ProcMem(sp.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	stdin.Close()
	sp.Wait()
	// The session goes, and bird forgets the prefixes (graceful restart
	// is not configured on this bird).
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if o, _ := router.Birdc("show", "route", "count"); strings.Contains(o, "0 of 0 routes") {
			break
		}
	}

	// The reference: a bird announcing the same prefixes.
	var static strings.Builder
	for i := range benchPrefixes {
		fmt.Fprintf(&static, "\troute %s unreachable;\n", benchPrefix(i))
	}
	birdtest.Start(b, spk, `
router id 10.77.0.2;
protocol device {}
protocol static { ipv4; `+static.String()+` }
protocol bgp peer { local as 64513; neighbor 10.77.0.1 as 64512; connect delay time 1; ipv4 { import none; export all; }; }
`)
	feeder := untilAll("bird")
	b.StopTimer()
	b.ReportMetric(float64(speaker.Milliseconds()), "speaker-ms")
	b.ReportMetric(float64(feeder.Milliseconds()), "bird-ms")
	b.ReportMetric(float64(speaker)/float64(feeder), "speaker/bird")
	b.ReportMetric(rss, "speaker-RSS-MiB")
	b.Logf("%d prefixes, session up to the last in bird's table: vmlaned's speaker %s, bird %s (%.2f×); speaker RSS %.1f MiB",
		benchPrefixes, speaker.Round(time.Millisecond), feeder.Round(time.Millisecond), float64(speaker)/float64(feeder), rss)
}
