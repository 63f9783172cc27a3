package leases

import (
	"context"
	"strings"
	"testing"
	"time"
)

// An empty path reads the node's own lease file: bootpd's on macOS,
// vmlane's elsewhere.
func TestEmptyPathIsNodePath(t *testing.T) {
	if _, err := Read(""); err != nil && !strings.Contains(err.Error(), NodePath) {
		t.Errorf("Read(\"\") = %v; want it to read %s", err, NodePath)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Wait(ctx, "", "02:00:00:00:00:01"); err == nil || !strings.Contains(err.Error(), NodePath) {
		t.Errorf("Wait(\"\") = %v; want it to wait on %s", err, NodePath)
	}
}
