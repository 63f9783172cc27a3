package routes

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// The macOS routing-socket path reads the kernel's messages with
// golang.org/x/net/route, whose parser has panicked on darwin messages it
// did not expect before, and whose FetchRIB gives up with ENOMEM when the
// table grows three times in a row while it reads. These keep either from
// costing more than one table read: they are here, not in the darwin
// files, so that they are tested on every system.

// ribTries is how many times fetchRetry asks for the table.
const ribTries = 5

// fetchRetry calls fetch until it does not fail with ENOMEM (the table
// grew between sizing the buffer and filling it), at most ribTries times,
// waiting a little longer each time.
func fetchRetry(fetch func() ([]byte, error), sleep func(time.Duration)) ([]byte, error) {
	var err error
	for i := range ribTries {
		var b []byte
		if b, err = fetch(); err == nil || !errors.Is(err, syscall.ENOMEM) {
			return b, err
		}
		sleep(time.Duration(i+1) * 10 * time.Millisecond)
	}
	return nil, fmt.Errorf("reading the routing table: it kept changing (%d tries): %w", ribTries, err)
}

// safeParse runs parse, turning a panic into an error, so that a message
// the parser chokes on costs a resync, never the daemon.
func safeParse[T any](parse func() (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, fmt.Errorf("parsing routing messages: the parser panicked: %v", r)
		}
	}()
	return parse()
}
