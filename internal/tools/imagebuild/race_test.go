//go:build race

package main

// raceEnabled: the test binary runs under the race detector, which makes
// reading vmlane's 230 MB layer take half a minute.
const raceEnabled = true
