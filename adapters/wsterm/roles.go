package wsterm

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Roles, label scope and the audit of control frames on /ws.
//
// A viewer observes: it lists agents and sessions, joins a session as an
// observer and leaves it; creating sessions or shells, asking for control,
// input, resize, signals and kills are refused with a forbidden error
// frame naming the token and its role. An operator and an admin do
// everything. A token with a label scope sees only the agents whose
// environment carries the scope (access.AgentInScope) and their sessions;
// any other agent or session is answered as if it did not exist.

// mayControl refuses what would act on a session to a viewer.
func (c *conn) mayControl(what string) error {
	if c.who.Role == access.Operator || c.who.Role == access.Admin {
		return nil
	}
	return bad("forbidden", "token %q has role %q, which may only observe sessions: it may not %s", c.who.Name, c.who.Role, what)
}

// agentInScope tells whether the connection's token sees agentID.
func (c *conn) agentInScope(agentID string) bool {
	return access.AgentInScope(c.who.Labels, agentID, c.srv.cfg.EnvironmentLabels)
}

// sessionInScope is nil when the connection's token sees session id
// (session_not_found otherwise, as for one that does not exist).
func (c *conn) sessionInScope(id string) error {
	if len(c.who.Labels) == 0 {
		return nil
	}
	s, ok := c.srv.cfg.Sessions.Get(id)
	if !ok || !c.agentInScope(s.AgentID) {
		return session.ErrNotFound
	}
	return nil
}

// controlWhat says what an audited operation does, for a viewer's refusal.
var controlWhat = map[string]string{
	"ws.createSession": "create sessions",
	"ws.startShell":    "start shells",
	"ws.takeControl":   "take control of a session",
	"ws.signal":        "signal a session",
	"ws.killSession":   "kill a session",
}

// control performs an audited control frame: refused to a viewer, else
// do, which returns the target (the session's id, or the agent's when no
// session was made). Either way one audit entry records the outcome.
func (c *conn) control(op, target string, do func() (string, error)) error {
	err := c.mayControl(controlWhat[op])
	if err == nil {
		target, err = do()
	}
	c.audit(op, target, err)
	return err
}

// audit records one control frame (never its data) in the audit log, and
// its request id in the server's log.
func (c *conn) audit(op, target string, err error) {
	status, code := http.StatusOK, ""
	if err != nil {
		code = "internal_error"
		var pe *ProtocolError
		if errors.As(mapError(err), &pe) {
			code = pe.Code
		}
		status = statusOf(code)
	}
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	rid := hex.EncodeToString(b[:])
	c.srv.cfg.Logger.Info("wsterm: control", "operation", op, "target", target, "actor", c.who.Name, "role", c.who.Role,
		"client", c.client, "status", status, "code", code, "request_id", rid)
	if c.srv.cfg.Audit == nil {
		return
	}
	e := ports.AuditEntry{At: time.Now().UTC(), Actor: c.who.Name, Role: c.who.Role, Client: c.client,
		Operation: op, Target: target, Status: status, Code: code, RequestID: rid}
	if aerr := c.srv.cfg.Audit.Append(e); aerr != nil {
		c.srv.cfg.Logger.Error("wsterm: audit entry not kept", "request_id", rid, "operation", op, "err", aerr)
	}
}

// statusOf is the HTTP status an error frame's code stands for in the
// audit log (the REST API answers the same failures with these).
func statusOf(code string) int {
	switch code {
	case "forbidden":
		return http.StatusForbidden
	case "session_not_found", "agent_not_found":
		return http.StatusNotFound
	case "not_controller", "session_ended":
		return http.StatusConflict
	case "invalid_request", "invalid_frame":
		return http.StatusBadRequest
	case "too_many_sessions":
		return http.StatusTooManyRequests
	case "agent_not_connected":
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
