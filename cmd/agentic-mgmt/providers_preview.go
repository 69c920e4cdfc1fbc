package main

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/preview"
	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// providePublicPorts is the store of public preview marks, in the data dir.
func providePublicPorts(cfg Config) (*filestore.PublicPorts, error) {
	s, err := filestore.NewPublicPorts(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("public preview marks: %w", err)
	}
	return s, nil
}

// newPreviews serves preview hosts and /preview/… in front of the REST
// handler, reaching environments over the agent link.
func newPreviews(cfg Config, op OperatorHTTP, svc *agentrpc.Service, dialer ports.PortDialer, uc UseCases, public *filestore.PublicPorts, signIns *signin.Sessions,
	tokens ports.TokenStore, clock ports.Clock, log *slog.Logger) *preview.Handler {
	return preview.New(preview.Config{
		Dialer: dialer, Public: public, Token: op.Token, SignIns: signIns, Domain: cfg.PreviewDomain, KeepHost: cfg.PreviewKeepHost,
		Resolve:         previewTargets(uc.Environments.Names, func(name string) bool { _, ok := svc.Agent(name); return ok }, agentIDs(svc)),
		SessionMayReach: sessionMayReach(tokens, uc.Environments.Get),
		Clock:           clock, Logger: log,
	})
}

// sessionMayReach is the label scope of a dashboard session's token over
// the previews (core/access.AgentInScope, as on the REST API): the
// operator token's session reaches every agent; a named token's only the
// agents its scope covers; a token no longer kept, none.
func sessionMayReach(tokens ports.TokenStore, env func(string) (environment.Environment, bool)) func(tokenID, agentID string) bool {
	labels := func(name string) (map[string]string, bool) {
		e, ok := env(name)
		return e.Labels, ok
	}
	return func(tokenID, agentID string) bool {
		if tokenID == signin.OperatorTokenID {
			return true
		}
		if tokens == nil {
			return false
		}
		t, err := tokens.Get(tokenID)
		return err == nil && access.AgentInScope(t.Labels, agentID, labels)
	}
}

func agentIDs(svc *agentrpc.Service) func() []string {
	return func() []string {
		var ids []string
		for _, a := range svc.Agents() {
			ids = append(ids, a.ID)
		}
		return ids
	}
}

// previewTargets resolves a name from a preview URL to an agent id: an
// environment's name is its agent's id, and a plain agent (a host agent)
// is reached by its id. The host form folds case (browsers lower-case host
// names); a fold that matches two names is refused rather than guessed.
func previewTargets(envNames func() []string, agentKnown func(string) bool, agents func() []string) func(string, bool) (string, error) {
	return func(name string, fold bool) (string, error) {
		if slices.Contains(envNames(), name) || agentKnown(name) {
			return name, nil
		}
		if !fold {
			return "", fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
		}
		var matches []string
		for _, n := range append(envNames(), agents()...) {
			if strings.EqualFold(n, name) && !slices.Contains(matches, n) {
				matches = append(matches, n)
			}
		}
		switch len(matches) {
		case 0:
			return "", fmt.Errorf("%w: %q", ports.ErrEnvNotFound, name)
		case 1:
			return matches[0], nil
		}
		return "", fmt.Errorf("%w: %q names %s, which differ only in case: use the path form /preview/<name>/<port>/", preview.ErrAmbiguousName, name, strings.Join(matches, " and "))
	}
}
