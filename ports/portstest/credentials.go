package portstest

import (
	"errors"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// RunAgentCredentialsSuite checks the promises of ports.AgentCredentials;
// open returns a store kept in dir (the same dir again is the store
// reopened).
func RunAgentCredentialsSuite(t *testing.T, open func(t *testing.T, dir string) ports.AgentCredentials) {
	verify := func(t *testing.T, c ports.AgentCredentials, id, secret string, want bool) {
		t.Helper()
		if ok, err := c.Verify(id, secret); err != nil || ok != want {
			t.Fatalf("Verify(%s, %q) = %v, %v; want %v", id, secret, ok, err, want)
		}
	}
	t.Run("PutVerifyDelete", func(t *testing.T) {
		dir := t.TempDir()
		c := open(t, dir)
		verify(t, c, "a1", "s1", false)
		if err := c.Put("a1", "s1"); err != nil {
			t.Fatal(err)
		}
		verify(t, c, "a1", "s1", true)
		verify(t, c, "a1", "s2", false)
		verify(t, c, "a1", "", false)
		verify(t, c, "a2", "s1", false)
		if err := c.Put("a1", "s2"); err != nil {
			t.Fatal(err)
		}
		verify(t, c, "a1", "s1", false)
		verify(t, open(t, dir), "a1", "s2", true)
		if err := c.Delete("a1"); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete("never"); err != nil {
			t.Fatalf("Delete of an unknown agent: %v", err)
		}
		verify(t, c, "a1", "s2", false)
		verify(t, open(t, dir), "a1", "s2", false)
	})
	t.Run("CreateRefusesToReplace", func(t *testing.T) {
		c := open(t, t.TempDir())
		if err := c.Create("a1", "s1"); err != nil {
			t.Fatal(err)
		}
		if err := c.Create("a1", "s2"); !errors.Is(err, ports.ErrCredentialExists) {
			t.Fatalf("Create over a credential = %v, want ErrCredentialExists", err)
		}
		verify(t, c, "a1", "s1", true)
	})
	t.Run("PinKindFirstWins", func(t *testing.T) {
		dir := t.TempDir()
		c := open(t, dir)
		if err := c.Put("a1", "s1"); err != nil {
			t.Fatal(err)
		}
		if k, err := c.PinKind("a1", ports.KindContainer); err != nil || k != ports.KindContainer {
			t.Fatalf("first PinKind = %q, %v", k, err)
		}
		if k, err := c.PinKind("a1", ports.KindHost); err != nil || k != ports.KindContainer {
			t.Fatalf("second PinKind = %q, %v; want the first kind", k, err)
		}
		if k, err := open(t, dir).PinKind("a1", ports.KindHost); err != nil || k != ports.KindContainer {
			t.Fatalf("PinKind after reopen = %q, %v; want the first kind", k, err)
		}
		// Delete forgets the kind with the secret.
		if err := c.Delete("a1"); err != nil {
			t.Fatal(err)
		}
		if k, err := c.PinKind("a1", ports.KindHost); err != nil || k != ports.KindHost {
			t.Fatalf("PinKind after Delete = %q, %v; want a new pin", k, err)
		}
	})
}
