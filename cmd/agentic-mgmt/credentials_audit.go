package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The audit operations of agent credentials: an environment's agent gets
// one when it is created and loses it when deleted, a host agent gets a
// fresh one each time its supervisor starts it, a pool member's is revoked
// once the environment that took it has its own.
const (
	opCredentialIssue  = "agent.credential.issue"  //nolint:gosec // an operation's name, not a credential
	opCredentialRevoke = "agent.credential.revoke" //nolint:gosec // an operation's name, not a credential
)

// actorSystem is the audit log's actor for what the server does on its own
// (a host agent started, a pool refilled, a task's environment).
const actorSystem = "system"

// credentialAudit is ports.AgentCredentials writing one audit line for each
// agent credential issued (Put, Create) or revoked (Delete): the agent id
// as the target, never the secret or its hash. The actor is the REST
// caller whose request caused it (attribute), else "system".
type credentialAudit struct {
	ports.AgentCredentials
	audit ports.AuditLog
	clock ports.Clock
	log   *slog.Logger

	mu sync.Mutex
	// asked holds, by agent id, who asked for the requests under way that
	// may issue or revoke that agent's credential, oldest first.
	asked map[string][]rest.Requester
}

// revoker is a credential store that says whether a Delete found anything,
// so that forgetting an agent that had no credential writes no line.
type revoker interface {
	Revoke(agentID string) (existed bool, err error)
}

func newCredentialAudit(inner ports.AgentCredentials, audit ports.AuditLog, clock ports.Clock, log *slog.Logger) *credentialAudit {
	return &credentialAudit{AgentCredentials: inner, audit: audit, clock: clock, log: log, asked: map[string][]rest.Requester{}}
}

// Put implements ports.AgentCredentials.
func (c *credentialAudit) Put(agentID, secret string) error {
	err := c.AgentCredentials.Put(agentID, secret)
	c.record(opCredentialIssue, agentID, err)
	return err
}

// Create implements ports.AgentCredentials; a refusal to replace an
// existing credential issued nothing and is not recorded.
func (c *credentialAudit) Create(agentID, secret string) error {
	err := c.AgentCredentials.Create(agentID, secret)
	if errors.Is(err, ports.ErrCredentialExists) {
		return err
	}
	c.record(opCredentialIssue, agentID, err)
	return err
}

// Delete implements ports.AgentCredentials.
func (c *credentialAudit) Delete(agentID string) error {
	if r, ok := c.AgentCredentials.(revoker); ok {
		existed, err := r.Revoke(agentID)
		if existed || err != nil {
			c.record(opCredentialRevoke, agentID, err)
		}
		return err
	}
	err := c.AgentCredentials.Delete(agentID)
	c.record(opCredentialRevoke, agentID, err)
	return err
}

// attribute says that the request of ctx may issue or revoke agentID's
// credential until done is called: those lines name its caller and carry
// its request id. A ctx of no REST request attributes nothing.
func (c *credentialAudit) attribute(ctx context.Context, agentID string) (done func()) {
	who, ok := rest.RequesterOf(ctx)
	if !ok {
		return func() {}
	}
	c.mu.Lock()
	c.asked[agentID] = append(c.asked[agentID], who)
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		list := c.asked[agentID]
		if i := slices.Index(list, who); i >= 0 {
			list = slices.Delete(list, i, i+1)
		}
		if len(list) == 0 {
			delete(c.asked, agentID)
		} else {
			c.asked[agentID] = list
		}
	}
}

// record appends the line of op on agentID's credential; err is the
// store's failure (the credential was then not issued, or not revoked).
func (c *credentialAudit) record(op, agentID string, err error) {
	e := ports.AuditEntry{At: c.clock.Now().UTC(), Actor: actorSystem, Operation: op, Target: agentID, Status: http.StatusOK}
	c.mu.Lock()
	if list := c.asked[agentID]; len(list) > 0 {
		who := list[0]
		e.Actor, e.Role, e.Client, e.RequestID = who.Actor.Name, who.Actor.Role, who.Client, who.RequestID
	}
	c.mu.Unlock()
	if err != nil {
		e.Status, e.Code = http.StatusServiceUnavailable, "store_unavailable"
	}
	if aerr := c.audit.Append(e); aerr != nil {
		c.log.Error("agent credential audit entry not kept", "operation", op, "agent", agentID, "request_id", e.RequestID, "err", aerr)
	}
}

// attributedEnvironments is the environment use case as REST calls it: a
// create or delete attributes the credential of the environment's agent
// (named after it) to the caller.
type attributedEnvironments struct {
	*environment.Service
	creds *credentialAudit
}

// Create implements rest.Environments.
func (e attributedEnvironments) Create(ctx context.Context, req environment.Request) (environment.Environment, error) {
	defer e.creds.attribute(ctx, req.Name)()
	return e.Service.Create(ctx, req)
}

// Delete implements rest.Environments.
func (e attributedEnvironments) Delete(ctx context.Context, name string) error {
	defer e.creds.attribute(ctx, name)()
	return e.Service.Delete(ctx, name)
}
