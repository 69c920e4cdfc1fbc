package rest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"net/http"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/secret"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// TokenSecretPrefix starts every named token's secret (so that a leaked one
// is recognisable, e.g. by secret scanners).
const TokenSecretPrefix = "ast_"

func noTokens() *apiError {
	return newError(http.StatusServiceUnavailable, "store_unavailable", "this server keeps no named tokens")
}

func tokenNotFound(ref string) *apiError {
	return newError(http.StatusNotFound, "token_not_found", "token %q: not found", clip(ref))
}

func tokenStoreError(err error, subject string) *apiError {
	switch {
	case errors.Is(err, ports.ErrTokenExists):
		return newError(http.StatusConflict, "token_exists", "%s: a token with that name exists", subject)
	case errors.Is(err, ports.ErrTokenNotFound):
		return newError(http.StatusNotFound, "token_not_found", "%s: not found", subject)
	}
	return newError(http.StatusServiceUnavailable, "store_unavailable", "%s: the token store failed; try again", subject)
}

func toToken(t ports.Token) restapi.Token {
	out := restapi.Token{Id: t.ID, Name: t.Name, Role: restapi.TokenRole(t.Role), CreatedAt: t.CreatedAt.UTC()}
	if !t.ExpiresAt.IsZero() {
		e := t.ExpiresAt.UTC()
		out.ExpiresAt = &e
	}
	if len(t.Labels) > 0 {
		l := restapi.TokenLabels(maps.Clone(t.Labels))
		out.Labels = &l
	}
	return out
}

// CreateToken makes a named token; its secret is in this answer only.
func (s *Server) CreateToken(ctx context.Context, req restapi.CreateTokenRequestObject) (restapi.CreateTokenResponseObject, error) {
	if s.d.Tokens == nil {
		return nil, noTokens()
	}
	b := req.Body
	if strings.HasPrefix(b.Name, "tok_") {
		return nil, badRequest("token name %q: a name may not start with tok_ (ids do)", clip(b.Name))
	}
	if !access.ValidRole(string(b.Role)) {
		return nil, badRequest("role %q: want one of %s", clip(string(b.Role)), strings.Join(access.Roles, ", "))
	}
	now := s.clock.Now()
	t := ports.Token{Name: b.Name, Role: string(b.Role), CreatedAt: now.UTC()}
	if b.ExpiresAt != nil {
		if !b.ExpiresAt.After(now) {
			return nil, badRequest("expires_at %s is not in the future", b.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z07:00"))
		}
		t.ExpiresAt = b.ExpiresAt.UTC()
	}
	if b.Labels != nil && len(*b.Labels) > 0 {
		for k, v := range *b.Labels {
			if !access.ValidLabel(k, v) {
				return nil, badRequest("label %q=%q: keys and values are 1..63 of A-Za-z0-9._- (a key may have one prefix/)", clip(k), clip(v))
			}
		}
		t.Labels = maps.Clone(map[string]string(*b.Labels))
	}
	// An admin with a label scope makes tokens within it, never wider.
	if scope := scopeOf(ctx); len(scope) > 0 {
		t.Labels = access.WithScope(scope, t.Labels)
	}
	sec, err := secret.Token()
	if err != nil {
		return nil, err
	}
	sec = TokenSecretPrefix + sec
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	t.ID = "tok_" + hex.EncodeToString(id[:])
	t.Hash = ports.HashTokenSecret(sec)
	if err := s.d.Tokens.Create(t); err != nil {
		return nil, tokenStoreError(err, "token "+quote(b.Name))
	}
	by := "?"
	if c, ok := callerOf(ctx); ok {
		by = c.Name
	}
	s.log.InfoContext(ctx, "rest: token created", "token", t.Name, "id", t.ID, "role", t.Role, "by", by)
	v := toToken(t)
	return restapi.CreateToken201JSONResponse{Id: v.Id, Name: v.Name, Role: v.Role, CreatedAt: v.CreatedAt,
		ExpiresAt: v.ExpiresAt, Labels: v.Labels, Token: sec}, nil
}

// ListTokens lists the named tokens, never their secrets.
func (s *Server) ListTokens(ctx context.Context, _ restapi.ListTokensRequestObject) (restapi.ListTokensResponseObject, error) {
	out := restapi.ListTokens200JSONResponse{Tokens: []restapi.Token{}}
	if s.d.Tokens == nil {
		return out, nil
	}
	list, err := s.d.Tokens.List()
	if err != nil {
		return nil, tokenStoreError(err, "tokens")
	}
	// A scoped admin sees the tokens within its scope only.
	for _, t := range inScope(ctx, list, func(t ports.Token) bool { return access.InScope(scopeOf(ctx), t.Labels) }) {
		out.Tokens = append(out.Tokens, toToken(t))
	}
	return out, nil
}

// DeleteToken revokes a named token by id or name; the next request with
// it is refused.
func (s *Server) DeleteToken(ctx context.Context, req restapi.DeleteTokenRequestObject) (restapi.DeleteTokenResponseObject, error) {
	if s.d.Tokens == nil {
		return nil, tokenNotFound(req.Token)
	}
	// A scoped admin revokes only tokens within its scope; others are absent.
	if scope := scopeOf(ctx); len(scope) > 0 {
		if t, err := s.d.Tokens.Get(req.Token); err == nil && !access.InScope(scope, t.Labels) {
			return nil, tokenNotFound(req.Token)
		}
	}
	t, err := s.d.Tokens.Delete(req.Token)
	if err != nil {
		return nil, tokenStoreError(err, "token "+quote(req.Token))
	}
	by := "?"
	if c, ok := callerOf(ctx); ok {
		by = c.Name
	}
	s.log.InfoContext(ctx, "rest: token revoked", "token", t.Name, "id", t.ID, "role", t.Role, "by", by)
	// Its dashboard sessions end too, with what they opened (pages'
	// streams): the token is already refused, so this cannot undo it.
	if err := s.d.SignIns.EndForToken(t.ID); err != nil {
		s.log.ErrorContext(ctx, "rest: the dashboard sessions of a revoked token could not be deleted (they are refused anyway)", "token", t.Name, "id", t.ID, "err", err)
	}
	// What it opened itself (event streams, client WebSockets) closes now.
	s.d.Watch.EndToken(t.ID)
	return restapi.DeleteToken204Response{}, nil
}

func quote(s string) string { return `"` + clip(s) + `"` }
