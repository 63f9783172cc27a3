// Package netnstest makes network namespaces for privileged tests: each
// test gets fresh, uniquely named namespaces that are deleted in t.Cleanup
// (so also when the test fails), and a namespace left behind by a test
// binary that was killed is swept by the next run. Nothing here touches the
// host's own interfaces, routes or sysctls.
//
// It is Linux-only; on other systems the package is empty.
package netnstest
