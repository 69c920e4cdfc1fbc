package portstest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// RunTokenStoreSuite is the conformance suite of ports.TokenStore; open
// returns a store kept in dir (the same dir again is the store reopened,
// as after a restart).
func RunTokenStoreSuite(t *testing.T, open func(t *testing.T, dir string) ports.TokenStore) {
	now := time.Date(2026, 5, 9, 7, 0, 0, 0, time.UTC)
	tok := func(id, name, role, secret string) ports.Token {
		return ports.Token{ID: id, Name: name, Role: role, CreatedAt: now, Hash: ports.HashTokenSecret(secret)}
	}
	t.Run("CreateVerifyAndReopen", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		a := tok("tok_0000000000000001", "ci", "viewer", "ast_secret-a")
		a.Labels = map[string]string{"team": "payments"}
		a.ExpiresAt = now.Add(time.Hour)
		b := tok("tok_0000000000000002", "bot", "executor", "ast_secret-b")
		for _, x := range []ports.Token{a, b} {
			if err := s.Create(x); err != nil {
				t.Fatalf("Create(%s): %v", x.Name, err)
			}
		}
		for _, st := range []ports.TokenStore{s, open(t, dir)} {
			got, ok := st.Verify("ast_secret-a", now)
			if !ok || !sameToken(got, a) {
				t.Fatalf("Verify(a) = %+v, %v; want %+v", got, ok, a)
			}
			if _, ok := st.Verify("ast_secret-c", now); ok {
				t.Fatal("an unknown secret verified")
			}
			if _, ok := st.Verify("", now); ok {
				t.Fatal("an empty secret verified")
			}
			list, err := st.List()
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 2 || list[0].Name != "bot" || list[1].Name != "ci" || !sameToken(list[1], a) {
				t.Fatalf("List = %+v, want bot then ci", list)
			}
			for _, ref := range []string{a.ID, a.Name} {
				got, err := st.Get(ref)
				if err != nil || !sameToken(got, a) {
					t.Fatalf("Get(%q) = %+v, %v", ref, got, err)
				}
			}
		}
	})
	t.Run("ExpiredTokensDoNotVerify", func(t *testing.T) {
		s := open(t, t.TempDir())
		a := tok("tok_0000000000000001", "ci", "viewer", "ast_x")
		a.ExpiresAt = now.Add(time.Minute)
		if err := s.Create(a); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Verify("ast_x", now.Add(time.Minute-time.Nanosecond)); !ok {
			t.Fatal("refused before its expiry")
		}
		if _, ok := s.Verify("ast_x", now.Add(time.Minute)); ok {
			t.Fatal("verified at its expiry")
		}
		if _, err := s.Get("ci"); err != nil {
			t.Fatalf("an expired token is still listed: %v", err)
		}
	})
	t.Run("NamesIDsAndSecretsAreUnique", func(t *testing.T) {
		s := open(t, t.TempDir())
		if err := s.Create(tok("tok_0000000000000001", "ci", "viewer", "ast_1")); err != nil {
			t.Fatal(err)
		}
		for _, dup := range []ports.Token{
			tok("tok_0000000000000002", "ci", "admin", "ast_2"),
			tok("tok_0000000000000001", "other", "admin", "ast_3"),
			tok("tok_0000000000000003", "third", "admin", "ast_1"),
		} {
			if err := s.Create(dup); !errors.Is(err, ports.ErrTokenExists) {
				t.Fatalf("Create(%+v) = %v, want ErrTokenExists", dup, err)
			}
		}
		if got, _ := s.Verify("ast_1", now); got.Role != "viewer" {
			t.Fatalf("the first token changed: %+v", got)
		}
	})
	t.Run("DeleteByIDOrNameRevokesAtOnce", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		_ = s.Create(tok("tok_0000000000000001", "ci", "viewer", "ast_1"))
		_ = s.Create(tok("tok_0000000000000002", "bot", "executor", "ast_2"))
		if got, err := s.Delete("ci"); err != nil || got.ID != "tok_0000000000000001" {
			t.Fatalf("Delete(ci) = %+v, %v", got, err)
		}
		if _, err := s.Delete("tok_0000000000000002"); err != nil {
			t.Fatal(err)
		}
		for _, st := range []ports.TokenStore{s, open(t, dir)} {
			for _, sec := range []string{"ast_1", "ast_2"} {
				if _, ok := st.Verify(sec, now); ok {
					t.Fatalf("%s verified after its delete", sec)
				}
			}
			if _, err := st.Get("ci"); !errors.Is(err, ports.ErrTokenNotFound) {
				t.Fatalf("Get after delete: %v", err)
			}
			if _, err := st.Delete("ci"); !errors.Is(err, ports.ErrTokenNotFound) {
				t.Fatalf("Delete twice: %v", err)
			}
			if list, _ := st.List(); len(list) != 0 {
				t.Fatalf("List after deletes = %+v", list)
			}
		}
	})
	t.Run("ConcurrentCreates", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.Create(tok(fmt.Sprintf("tok_%016x", i), fmt.Sprintf("t%02d", i), "viewer", fmt.Sprintf("ast_%d", i))); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		list, err := open(t, dir).List()
		if err != nil || len(list) != 20 {
			t.Fatalf("after 20 concurrent creates, reopened: %d tokens, %v", len(list), err)
		}
	})
}

func sameToken(a, b ports.Token) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Role == b.Role && a.Hash == b.Hash &&
		a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		(len(a.Labels) == 0 && len(b.Labels) == 0 || reflect.DeepEqual(a.Labels, b.Labels))
}
