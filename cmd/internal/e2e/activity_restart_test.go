package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// getEnv is an environment as the REST API answers it.
func getEnv(t *testing.T, s *harness.Server, name string) restapi.Environment {
	t.Helper()
	ctx, cancel := ctxFor(patience)
	defer cancel()
	r, err := s.Client().GetEnvironmentWithResponse(ctx, name)
	if err != nil || r.JSON200 == nil {
		t.Fatalf("get %s: %v %v", name, err, r)
	}
	return *r.JSON200
}

// lastActivity is an environment's last_activity_at and last_activity_kind.
func lastActivity(t *testing.T, s *harness.Server, name string) (time.Time, string) {
	t.Helper()
	e := getEnv(t, s, name)
	if e.LastActivityAt == nil || e.LastActivityKind == nil {
		return time.Time{}, ""
	}
	return *e.LastActivityAt, *e.LastActivityKind
}

// An environment's last activity outlives restarts of agentic-mgmt (issue
// 32): after a SIGTERM, a running container and a hibernated one still say
// when they were last used and for what; after a SIGKILL, what the server
// wrote while running (every 10 s at most, not per use) is kept.
func TestLastActivityOutlivesARestart(t *testing.T) {
	s := startDockerSleeper(t)
	suffix := time.Now().UnixNano() % 100000
	busy, asleep := fmt.Sprintf("act-%d", suffix), fmt.Sprintf("act-zz-%d", suffix)
	createReady(t, s, "docker", busy, "")
	createReady(t, s, "docker", asleep, "")
	execOut(t, s, busy, "true")
	putFile(t, s, asleep, "/tmp/note", []byte("kept\n"), "0644")
	hibernated(t, s, asleep)
	busyAt, busyKind := lastActivity(t, s, busy)
	asleepAt, asleepKind := lastActivity(t, s, asleep)
	if busyKind != "exec" || asleepKind != "files" {
		t.Fatalf("before the restart: %s %q, %s %q", busyAt, busyKind, asleepAt, asleepKind)
	}

	stop(t, s)
	s = restart(t, s)
	waitEnv(t, s, busy, "ready")
	waitEnv(t, s, asleep, "hibernated")
	for _, c := range []struct {
		name string
		at   time.Time
		kind string
	}{{busy, busyAt, busyKind}, {asleep, asleepAt, asleepKind}} {
		if at, kind := lastActivity(t, s, c.name); !at.Equal(c.at) || kind != c.kind {
			t.Errorf("%s after a restart: last activity %s %q, want %s %q", c.name, at, kind, c.at, c.kind)
		}
	}

	// Used again, then killed outright: the periodic write has it.
	execOut(t, s, busy, "true")
	busyAt, _ = lastActivity(t, s, busy)
	stored := filepath.Join(s.Opts.DataDir, "environments", "activity.json")
	if !testkit.Within(patience, func() bool {
		b, err := os.ReadFile(stored)
		var acts map[string]struct {
			At time.Time `json:"at"`
		}
		return err == nil && json.Unmarshal(b, &acts) == nil && acts[busy].At.Equal(busyAt)
	}) {
		b, _ := os.ReadFile(stored)
		t.Fatalf("%s's activity at %s never written: %s", busy, busyAt, b)
	}
	s.Kill()
	s = restart(t, s)
	waitEnv(t, s, busy, "ready")
	if at, kind := lastActivity(t, s, busy); !at.Equal(busyAt) || kind != "exec" {
		t.Fatalf("after a SIGKILL: last activity %s %q, want %s exec", at, kind, busyAt)
	}
	if strings.TrimSpace(execOut(t, s, asleep, "cat /tmp/note")) != "kept" {
		t.Fatal("the hibernated environment lost its file")
	}
}
