package rest

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A token with a label scope (core/access) reaches only the items that
// carry its labels:
//   - an environment, a task: its own labels;
//   - an agent: its environment's labels (access.AgentInScope: a host
//     agent, in no environment, is outside every non-empty scope);
//   - a session, a command, a mission, a HITL request: its agent's (a
//     task's HITL request: its task's).
//
// Pools serve every scope: a scoped token sees none and may not put or
// delete one; nor may it dispatch a mission (its agent is chosen among
// all). Lists show only what is in scope; a single item out of scope
// answers exactly as an absent one (404, the same code), for every
// operation on it: checkScope decides before any handler runs.

// scopeOf is the label scope of the caller of ctx (nil: everything, as for
// the operator token, an unscoped token, and aiwg serve's dispatch).
func scopeOf(ctx context.Context) map[string]string {
	c, ok := callerOf(ctx)
	if !ok {
		return nil
	}
	return c.Labels
}

// environmentLabels is the labels of the environment name, for
// access.AgentInScope.
func (s *Server) environmentLabels(name string) (map[string]string, bool) {
	if s.d.Environments == nil {
		return nil, false
	}
	e, ok := s.d.Environments.Get(name)
	return e.Labels, ok
}

// agentInScope tells whether the agent agentID is in the scope of ctx's caller.
func (s *Server) agentInScope(ctx context.Context, agentID string) bool {
	return access.AgentInScope(scopeOf(ctx), agentID, s.environmentLabels)
}

// environmentInScope tells whether the environment name is in the scope of
// ctx's caller (an unknown one is not, for a scoped caller).
func (s *Server) environmentInScope(ctx context.Context, name string) bool {
	scope := scopeOf(ctx)
	if len(scope) == 0 {
		return true
	}
	labels, ok := s.environmentLabels(name)
	return ok && access.InScope(scope, labels)
}

// sessionAgent is the agent of a session, or of the command a session id
// may also name (a mission's); ok is false when neither is known.
func (s *Server) sessionAgent(id string) (string, bool) {
	if s.d.Sessions != nil {
		if sess, ok := s.d.Sessions.Get(id); ok {
			return sess.AgentID, true
		}
	}
	return s.commandAgent(id)
}

// commandAgent is the agent a command runs on; ok is false for an unknown
// one.
func (s *Server) commandAgent(id string) (string, bool) {
	if e, ok, _ := s.store.get(id); ok {
		return e.agentID, true
	}
	if cmd, ok := s.d.Link.Lookup(id); ok {
		return cmd.AgentID(), true
	}
	return "", false
}

// taskInScope tells whether the task id is known and in scope.
func (s *Server) taskInScope(scope map[string]string, id string) bool {
	if s.d.Tasks == nil {
		return false
	}
	t, err := s.d.Tasks.Get(id)
	return err == nil && access.InScope(scope, t.Labels)
}

// hitlInScope tells whether the open HITL request id is known and in
// scope: a task's by its task's labels, a mission's by its agent.
func (s *Server) hitlInScope(ctx context.Context, id string) bool {
	if s.d.Tasks != nil {
		for _, h := range s.d.Tasks.OpenHITL() {
			if h.ID == id {
				return s.taskInScope(scopeOf(ctx), h.TaskID)
			}
		}
	}
	if s.d.Missions != nil {
		for _, h := range s.d.Missions.OpenHITL() {
			if h.ID == id {
				return s.agentInScope(ctx, h.AgentID)
			}
		}
	}
	return false
}

// scopedItem is how checkScope finds and refuses one kind of item named
// by a path parameter.
type scopedItem struct {
	inScope  func(s *Server, ctx context.Context, id string) bool
	notFound func(id string) *apiError
}

// scopedParams are the path parameters that name an item, by the kind of
// item. "name" names an environment, a pool or a task's artifact: see
// itemOf.
var scopedParams = map[string]scopedItem{
	"agent_id": {
		inScope:  (*Server).agentInScope,
		notFound: func(id string) *apiError { return agentNotFound(fmt.Sprintf("agent %q", clip(id))) },
	},
	"environment": {
		inScope:  (*Server).environmentInScope,
		notFound: func(id string) *apiError { return environmentNotFound(fmt.Sprintf("environment %q", clip(id))) },
	},
	"session_id": {
		inScope: func(s *Server, ctx context.Context, id string) bool {
			agent, ok := s.sessionAgent(id)
			return ok && s.agentInScope(ctx, agent)
		},
		notFound: sessionNotFoundErr,
	},
	"command_id": {
		inScope: func(s *Server, ctx context.Context, id string) bool {
			agent, ok := s.commandAgent(id)
			return ok && s.agentInScope(ctx, agent)
		},
		notFound: func(id string) *apiError { return commandNotFound(fmt.Sprintf("command %q", clip(id))) },
	},
	"task_id": {
		inScope: func(s *Server, ctx context.Context, id string) bool {
			return s.taskInScope(scopeOf(ctx), id)
		},
		notFound: func(id string) *apiError { return taskError(ports.ErrTaskNotFound, id).(*apiError) },
	},
	"mission_id": {
		inScope: func(s *Server, ctx context.Context, id string) bool {
			if s.d.Missions == nil {
				return false
			}
			m, err := s.d.Missions.Mission(id)
			return err == nil && s.agentInScope(ctx, m.AgentID)
		},
		notFound: func(id string) *apiError { return missionNotFound(fmt.Sprintf("mission %q", clip(id))) },
	},
	"hitl_id": {
		inScope:  (*Server).hitlInScope,
		notFound: func(id string) *apiError { return hitlNotFound(fmt.Sprintf("HITL request %q", clip(id))) },
	},
}

// listsItsOwn are the routes whose answer for an absent item is an empty
// list, not a 404: their handlers keep only what is in scope.
var listsItsOwn = map[string]bool{
	http.MethodGet + " /api/v1/agents/{agent_id}/sessions": true,
}

// checkScope is a middleware: for a caller with a label scope, every item
// the route's path names must be in scope, or the request is answered as
// if the item did not exist (and no handler runs). Pools are refused.
func (s *Server) checkScope(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(scopeOf(r.Context())) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if apiErr := s.scopeError(r); apiErr != nil {
			_ = apiErr.write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// scopeError is the answer to a scoped caller's request that names an item
// out of its scope, nil when every item it names is in scope.
func (s *Server) scopeError(r *http.Request) *apiError {
	if r.Pattern == dispatchRoute {
		// Its {session_id} is aiwg serve's, and a mission picks its agent
		// among all: a scoped token could reach outside its scope.
		return newError(http.StatusForbidden, "forbidden", "a token with a label scope may not dispatch missions: a mission may run on any agent")
	}
	sr := specRoutes()[r.Pattern]
	if sr == nil || listsItsOwn[r.Pattern] {
		return nil
	}
	_, path, _ := strings.Cut(r.Pattern, " ")
	for _, param := range sr.pathParams {
		kind := param
		if param == "name" {
			switch {
			case strings.HasPrefix(path, "/api/v1/environments/"):
				kind = "environment"
			case strings.HasPrefix(path, "/api/v1/pools/"):
				if r.Method == http.MethodGet {
					return poolNotFound(r.PathValue(param))
				}
				return newError(http.StatusForbidden, "forbidden", "a token with a label scope may not put or delete pools: they serve every scope")
			}
		}
		item, ok := scopedParams[kind]
		if !ok {
			continue // a port, a file path, an artifact of a task checked above
		}
		if id := r.PathValue(param); !item.inScope(s, r.Context(), id) {
			return item.notFound(id)
		}
	}
	return nil
}

// inScope keeps the items of list that keep says are in scope; an
// unscoped caller keeps them all.
func inScope[T any](ctx context.Context, list []T, keep func(T) bool) []T {
	if len(scopeOf(ctx)) == 0 {
		return list
	}
	out := make([]T, 0, len(list))
	for _, x := range list {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}
