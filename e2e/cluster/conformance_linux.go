package cluster

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Kubernetes' own conformance suite against the cluster: the upstream
// e2e.test (internal/testing/conformance/build.sh) run from the control
// plane's namespace with the admin kubeconfig, as sonobuoy or a CNI's CI
// runs it, its JUnit report read back.

// Conformance selections: what `make conformance` runs, and the subset
// `make test` runs.
var (
	// ConformanceFocus is every [sig-network] conformance test and the
	// Networking Granular Checks, for pods and for Services.
	ConformanceFocus = `\[sig-network\].*\[Conformance\]|\[sig-network\] Networking Granular Checks`
	// ConformanceSkip leaves out what a cluster on one machine cannot
	// have: a cloud load balancer, and tests that disrupt the cluster for
	// the rest. ConformanceLeftOut adds what this machine's kernel lacks.
	ConformanceSkip = `LoadBalancer|\[Disruptive\]`
	// ConformanceSubset is make test's: the Granular Checks for pods, one
	// for a pod reaching itself through its Service, HostPort, one
	// Services and one Proxy test.
	ConformanceSubset = `\[sig-network\] Networking Granular Checks: Pods should function for (intra|node)-pod communication: http|` +
		`\[sig-network\] Networking Granular Checks: Services should function for endpoint-Service: http|` +
		`\[sig-network\] HostPort validates that there is no conflict|` +
		`\[sig-network\] Services should serve a basic endpoint from pods|` +
		`\[sig-network\] Proxy version v1 should proxy through a service and a pod`
)

// ConformanceLeftOut is the skip expression for this machine: skip and,
// when the kernel has no SCTP (the Granular Checks' SCTP tests need it in
// every pod and node), the SCTP tests; with a sentence for each thing
// left out because of the machine.
func ConformanceLeftOut(skip string) (string, []string) {
	var why []string
	if !kernelHasSCTP() {
		skip += `|\[Feature:SCTPConnectivity\]`
		why = append(why, "[Feature:SCTPConnectivity]: this kernel has no SCTP (no sctp in /proc/net/protocols, /sys/module or the kernel's modules)")
	}
	return skip, why
}

// kernelHasSCTP reports whether SCTP is built in, loaded or loadable,
// without loading it (opening an SCTP socket would).
func kernelHasSCTP() bool {
	if b, err := os.ReadFile("/proc/net/protocols"); err == nil && strings.Contains(string(b), "\nSCTP") {
		return true
	}
	if _, err := os.Stat("/sys/module/sctp"); err == nil {
		return true
	}
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return false
	}
	var rel []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		rel = append(rel, byte(c))
	}
	_, err := os.Stat(filepath.Join("/lib/modules", string(rel), "kernel/net/sctp"))
	return err == nil
}

// ConformanceResult is what a run of the suite said: each test by name,
// and its outcome.
type ConformanceResult struct {
	Passed, Failed, Skipped []string
	// Failures are the failed tests' messages, by name.
	Failures map[string]string
	Took     time.Duration
}

// Summary is the line `make conformance` prints.
func (r ConformanceResult) Summary() string {
	return fmt.Sprintf("conformance: %d passed, %d failed, %d skipped (%s)", len(r.Passed), len(r.Failed), len(r.Skipped), r.Took.Round(time.Second))
}

// RunConformance runs dir's e2e.test with focus and skip against the
// cluster, its log to log, and reads its JUnit report. The suite's own
// flags: the skeleton provider (no cloud), the cluster's DNS domain, the
// kubectl the suite builds, one process (no parallel run: two cores).
func (c *Cluster) RunConformance(tb testing.TB, dir, focus, skip string, log io.Writer) ConformanceResult {
	tb.Helper()
	report := filepath.Join(c.dir, "conformance-report")
	if err := os.MkdirAll(report, 0o755); err != nil {
		tb.Fatal(err)
	}
	c.step("conformance: e2e.test --ginkgo.focus %q --ginkgo.skip %q", focus, skip)
	start := time.Now()
	cmd := exec.Command("ip", "netns", "exec", c.CP.NetNS, filepath.Join(dir, "e2e.test"),
		"--kubeconfig="+c.CP.Kubeconfig, "--provider=skeleton", "--kubectl-path="+c.KubectlPath,
		"--dns-domain="+ClusterDomain, "--report-dir="+report, "--e2e-output-dir="+report,
		"--ginkgo.focus="+focus, "--ginkgo.skip="+skip, "--ginkgo.no-color", "--ginkgo.timeout=80m",
		"--ginkgo.v")
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// A failed test fails e2e.test; the report says which.
	_ = cmd.Run()
	r, err := readJUnit(report)
	if err != nil {
		tb.Fatalf("conformance: %v (e2e.test's log says why)", err)
	}
	r.Took = time.Since(start)
	return r
}

// junitSuite is the part of the JUnit report e2e.test writes (ginkgo's,
// with the failure message attribute left out: the failure's text has
// it) read here.
type junitSuite struct {
	Cases []struct {
		Name    string `xml:"name,attr"`
		Skipped *struct {
			Message string `xml:"message,attr"`
		} `xml:"skipped"`
		Failure *junitText `xml:"failure"`
		Error   *junitText `xml:"error"`
	} `xml:"testcase"`
}

type junitText struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// message is what went wrong: the message attribute when there is one,
// else the text up to where it says in which node.
func (t *junitText) message() string {
	m := strings.TrimSpace(t.Message)
	if m == "" {
		m = strings.TrimSpace(t.Text)
		if i := strings.Index(m, "\nIn ["); i >= 0 {
			m = strings.TrimSpace(m[:i])
		}
	}
	if t.Type != "" && t.Type != "failed" {
		m = t.Type + ": " + m
	}
	return m
}

type junitReport struct {
	Suites []junitSuite `xml:"testsuite"`
}

// readJUnit reads every junit_*.xml of dir. Ginkgo lists each spec the
// focus or skip left out as skipped, with the message "skipped"; a spec
// that skipped itself says why ("skipped - REASON"), and only those count
// as skipped.
func readJUnit(dir string) (ConformanceResult, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "junit_*.xml"))
	if len(files) == 0 {
		return ConformanceResult{}, fmt.Errorf("no JUnit report in %s", dir)
	}
	r := ConformanceResult{Failures: map[string]string{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return r, err
		}
		var rep junitReport
		if err := xml.Unmarshal(b, &rep); err != nil {
			return r, fmt.Errorf("%s: %w", f, err)
		}
		for _, s := range rep.Suites {
			for _, tc := range s.Cases {
				name := strings.TrimPrefix(tc.Name, "[It] ")
				switch {
				case tc.Failure != nil:
					r.Failed = append(r.Failed, name)
					r.Failures[name] = tc.Failure.message()
				case tc.Error != nil:
					r.Failed = append(r.Failed, name)
					r.Failures[name] = tc.Error.message()
				case tc.Skipped != nil:
					reason, ok := strings.CutPrefix(tc.Skipped.Message, "skipped - ")
					if !ok {
						continue
					}
					r.Skipped = append(r.Skipped, name+": "+firstLine(reason))
				case strings.HasPrefix(tc.Name, "[SynchronizedBeforeSuite]") || strings.HasPrefix(tc.Name, "[SynchronizedAfterSuite]") ||
					strings.HasPrefix(tc.Name, "[ReportBeforeSuite]") || strings.HasPrefix(tc.Name, "[ReportAfterSuite]") ||
					strings.HasPrefix(tc.Name, "[BeforeSuite]") || strings.HasPrefix(tc.Name, "[AfterSuite]"):
				default:
					r.Passed = append(r.Passed, name)
				}
			}
		}
	}
	sort.Strings(r.Passed)
	sort.Strings(r.Failed)
	sort.Strings(r.Skipped)
	return r, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
