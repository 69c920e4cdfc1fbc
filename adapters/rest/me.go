package rest

import (
	"context"
	"maps"
	"net/http"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// GetMe says who the caller is: its token's name, role, label scope and
// expiry (the dashboard shows only what the role may do).
func (s *Server) GetMe(ctx context.Context, _ restapi.GetMeRequestObject) (restapi.GetMeResponseObject, error) {
	c, ok := callerOf(ctx)
	if !ok { // the auth step always says who; never reached
		return nil, newError(http.StatusUnauthorized, "unauthorized", "who the caller is is not known")
	}
	out := restapi.GetMe200JSONResponse{Name: c.Name, Role: restapi.TokenRole(c.Role), Labels: restapi.TokenLabels{}}
	if len(c.Labels) > 0 {
		out.Labels = restapi.TokenLabels(maps.Clone(c.Labels))
	}
	if !c.Expires.IsZero() {
		e := c.Expires.UTC()
		out.ExpiresAt = &e
	}
	return out, nil
}
