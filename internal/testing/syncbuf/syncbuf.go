// Package syncbuf is a byte buffer that one goroutine may write while
// others read it: the output of a child process (vmlaned, QEMU) that
// os/exec copies in while a test or harness polls it.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer guarded by a mutex. The zero value is empty
// and ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
