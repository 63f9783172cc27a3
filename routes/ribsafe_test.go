package routes

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFetchRetry(t *testing.T) {
	enomem := os.NewSyscallError("sysctl", syscall.ENOMEM)
	var slept []time.Duration
	sleep := func(d time.Duration) { slept = append(slept, d) }
	calls := 0
	b, err := fetchRetry(func() ([]byte, error) {
		calls++
		if calls < 3 {
			return nil, enomem
		}
		return []byte("rib"), nil
	}, sleep)
	if err != nil || string(b) != "rib" || calls != 3 || len(slept) != 2 {
		t.Errorf("fetchRetry = %q, %v after %d calls, %v sleeps; want the table on the third", b, err, calls, slept)
	}
	calls = 0
	if _, err := fetchRetry(func() ([]byte, error) { calls++; return nil, enomem }, sleep); !errors.Is(err, syscall.ENOMEM) ||
		!strings.Contains(err.Error(), "kept changing") || calls != ribTries {
		t.Errorf("always ENOMEM: %v after %d calls; want the error after %d", err, calls, ribTries)
	}
	calls = 0
	if _, err := fetchRetry(func() ([]byte, error) { calls++; return nil, syscall.EPERM }, sleep); !errors.Is(err, syscall.EPERM) || calls != 1 {
		t.Errorf("EPERM: %v after %d calls; want it at once", err, calls)
	}
}

func TestSafeParse(t *testing.T) {
	v, err := safeParse(func() ([]int, error) { return []int{1}, nil })
	if err != nil || len(v) != 1 {
		t.Errorf("safeParse = %v, %v", v, err)
	}
	v, err = safeParse(func() ([]int, error) {
		var m map[string]int
		m["x"] = 1 // panics, as a parser indexing past a short message does
		return []int{2}, nil
	})
	if err == nil || v != nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("safeParse of a panicking parser = %v, %v; want an error and nothing", v, err)
	}
}
