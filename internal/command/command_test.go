package command

import (
	"errors"
	"strings"
	"testing"
)

func TestExec(t *testing.T) {
	e := Exec{Tools: map[string]string{"cat": "/bin/cat", "sh": "/bin/sh"}}
	out, err := e.Run("token 42\n", "cat")
	if err != nil || out != "token 42\n" {
		t.Fatalf("cat with stdin: %q, %v", out, err)
	}
	// stdout and stderr together, as pfctl -E's token needs.
	out, err = e.Run("", "sh", "-c", "echo out; echo err >&2")
	if err != nil || out != "out\nerr\n" {
		t.Fatalf("both streams: %q, %v", out, err)
	}
	out, err = e.Run("", "sh", "-c", "echo writing to routing socket: File exists >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "File exists") || !strings.Contains(out, "File exists") {
		t.Fatalf("non-zero exit: %q, %v", out, err)
	}
	if _, err := e.Run("", "rm", "-rf", "/nonexistent"); !errors.Is(err, ErrUnknownTool) {
		t.Fatalf("a tool not in Tools ran: %v", err)
	}
	if _, err := e.Run(""); err == nil {
		t.Fatal("empty argv ran")
	}
	// The default set is macOS's own tools and nothing else.
	if _, err := (Exec{}).Run("", "cat"); !errors.Is(err, ErrUnknownTool) {
		t.Fatalf("the default tools allowed cat: %v", err)
	}
}
