package main

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// Each agent credential issued or revoked through the decorator is one
// audit line naming the agent, by "system" outside a REST request; a
// refused Create and the Delete of an agent without a credential change
// nothing and write nothing; no line holds the secret or its hash.
func TestCredentialAudit(t *testing.T) {
	store, err := filestore.NewAgentHashes(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := portsfake.NewAuditLog()
	clk := portsfake.NewClock(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	c := newCredentialAudit(store, log, clk, slog.New(slog.DiscardHandler))
	const secret1, secret2, secret3 = "secret-one-5f2b", "secret-two-9c1d", "secret-three-77aa"

	if err := c.Put("host-01", secret1); err != nil {
		t.Fatal(err)
	}
	if err := c.Create("env-a", secret2); err != nil {
		t.Fatal(err)
	}
	if err := c.Create("env-a", secret3); !errors.Is(err, ports.ErrCredentialExists) {
		t.Fatalf("a second Create: %v; want ErrCredentialExists", err)
	}
	if ok, err := c.Verify("env-a", secret2); !ok || err != nil {
		t.Fatalf("Verify through the decorator: %v %v", ok, err)
	}
	if err := c.Delete("env-a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete("never-had-one"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.Verify("env-a", secret2); ok {
		t.Fatal("a revoked credential still verifies")
	}

	want := []ports.AuditEntry{
		{Operation: opCredentialIssue, Target: "host-01"},
		{Operation: opCredentialIssue, Target: "env-a"},
		{Operation: opCredentialRevoke, Target: "env-a"},
	}
	got := log.Entries()
	if len(got) != len(want) {
		t.Fatalf("%d audit entries; want %d: %+v", len(got), len(want), got)
	}
	for i, e := range got {
		w := want[i]
		if e.Operation != w.Operation || e.Target != w.Target || e.Actor != actorSystem || e.Role != "" || e.Status != 200 || e.Code != "" || e.RequestID != "" || !e.At.Equal(clk.Now()) {
			t.Errorf("entry %d = %+v; want %s of %s by system, 200", i, e, w.Operation, w.Target)
		}
		line := strings.Join([]string{e.Actor, e.Role, e.Client, e.Operation, e.Target, e.Code, e.RequestID}, " ")
		for _, s := range []string{secret1, secret2, secret3} {
			if strings.Contains(line, s) {
				t.Errorf("entry %d holds a secret: %+v", i, e)
			}
		}
	}
}

// A store that fails: the line says the credential was not issued or not
// revoked (503 store_unavailable), and the caller still gets the error.
func TestCredentialAuditStoreFailure(t *testing.T) {
	boom := errors.New("disk gone")
	store := failingCredentials{portsfake.NewCredentials(), boom}
	log := portsfake.NewAuditLog()
	c := newCredentialAudit(store, log, portsfake.NewClock(time.Unix(0, 0)), slog.New(slog.DiscardHandler))
	if err := c.Put("host-01", "s"); !errors.Is(err, boom) {
		t.Fatalf("Put: %v", err)
	}
	if err := c.Delete("host-01"); !errors.Is(err, boom) {
		t.Fatalf("Delete: %v", err)
	}
	got := log.Entries()
	if len(got) != 2 || got[0].Operation != opCredentialIssue || got[1].Operation != opCredentialRevoke {
		t.Fatalf("entries %+v; want an issue and a revoke", got)
	}
	for _, e := range got {
		if e.Status != 503 || e.Code != "store_unavailable" || e.Target != "host-01" {
			t.Errorf("entry %+v; want 503 store_unavailable on host-01", e)
		}
	}
}

// failingCredentials fails every change with err.
type failingCredentials struct {
	*portsfake.Credentials
	err error
}

func (f failingCredentials) Put(string, string) error { return f.err }
func (f failingCredentials) Delete(string) error      { return f.err }
