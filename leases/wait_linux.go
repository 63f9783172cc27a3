package leases

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
)

// watchFile signals on changed whenever a file named like path is created,
// written or renamed into its folder. Writers rename a new file over the old
// one, so IN_MOVED_TO is the event that matters; the others cover writers
// that do not (bootpd-like) and the file's first creation.
func watchFile(path string) (changed <-chan struct{}, stop func(), err error) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, nil, os.NewSyscallError("inotify_init1", err)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_MOVED_TO|syscall.IN_CLOSE_WRITE|syscall.IN_CREATE); err != nil {
		syscall.Close(fd)
		return nil, nil, os.NewSyscallError("inotify_add_watch", err)
	}
	// A non-blocking fd handed to os.NewFile joins the runtime poller, so
	// Close wakes the blocked Read below.
	f := os.NewFile(uintptr(fd), "inotify")
	ch := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				// struct inotify_event: wd, mask, cookie, len (each 32
				// bits, host order), then len bytes of NUL-padded name.
				mask := binary.NativeEndian.Uint32(buf[off+4:])
				nameLen := binary.NativeEndian.Uint32(buf[off+12:])
				nameStart := off + syscall.SizeofInotifyEvent
				nameEnd := nameStart + int(nameLen)
				if nameEnd > n {
					break
				}
				name := string(trimNUL(buf[nameStart:nameEnd]))
				if name == base || mask&syscall.IN_Q_OVERFLOW != 0 {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
				off = nameEnd
			}
		}
	}()
	return ch, func() { f.Close() }, nil
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
