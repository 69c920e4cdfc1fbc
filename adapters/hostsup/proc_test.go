package hostsup

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAgentLogsAreRotated(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "agent.log")
	if err := os.WriteFile(log, make([]byte, maxAgentLog+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(log+".1", []byte("oldest"), 0o600); err != nil {
		t.Fatal(err)
	}
	rotateLog(log)
	if _, err := os.Stat(log); !os.IsNotExist(err) {
		t.Fatalf("the big log stayed: %v", err)
	}
	if fi, err := os.Stat(log + ".1"); err != nil || fi.Size() != maxAgentLog+1 {
		t.Fatalf("rotated log: %v %v", fi, err)
	}
	// A small log is left alone.
	if err := os.WriteFile(log, []byte("small"), 0o600); err != nil {
		t.Fatal(err)
	}
	rotateLog(log)
	if b, _ := os.ReadFile(log); string(b) != "small" {
		t.Fatalf("a small log was rotated: %q", b)
	}
}
