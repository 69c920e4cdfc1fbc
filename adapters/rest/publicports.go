package rest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// requestOrigin is what a ports list needs of its request to name the
// preview URLs: its scheme and the port of the Host it came to.
type requestOrigin struct {
	scheme string
	port   string // "" when the Host named none
}

type originKey struct{}

// withRequestOrigin is a strict middleware that hands the ports lists the
// origin of their request (a strict handler sees only its context).
func withRequestOrigin(f restapi.StrictHandlerFunc, operationID string) restapi.StrictHandlerFunc {
	if operationID != "ListEnvironmentPorts" && operationID != "ListAgentPorts" {
		return f
	}
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
		o := requestOrigin{scheme: "http"}
		if r.TLS != nil {
			o.scheme = "https"
		}
		if _, port, err := net.SplitHostPort(r.Host); err == nil {
			o.port = port
		}
		return f(context.WithValue(ctx, originKey{}, o), w, r, request)
	}
}

// previewURL is the URL that opens port of environment env in a browser:
// <scheme>://<port>-<env>.<preview domain>[:<port of the request>]/, in
// lower case as a browser writes a host name (the preview host matches
// names without regard to case).
func (s *Server) previewURL(ctx context.Context, env string, port int) string {
	o, ok := ctx.Value(originKey{}).(requestOrigin)
	if !ok {
		o = requestOrigin{scheme: "http"}
	}
	host := strings.ToLower(fmt.Sprintf("%d-%s.%s", port, env, s.d.PreviewDomain))
	if o.port != "" {
		host = net.JoinHostPort(host, o.port)
	}
	return o.scheme + "://" + host + "/"
}

// withPreviews fills the ports of environment env's list with their public
// marks and preview URLs.
func (s *Server) withPreviews(ctx context.Context, env string, l restapi.ListeningPortList) restapi.ListeningPortList {
	marks := map[int]time.Time{}
	if s.d.PublicPorts != nil {
		for _, m := range s.d.PublicPorts.Public(env, s.clock.Now()) {
			marks[int(m.Port)] = m.Until
		}
	}
	for i := range l.Ports {
		p := &l.Ports[i]
		if until, ok := marks[p.Port]; ok {
			u := until.UTC()
			p.Public, p.PublicUntil = true, &u
		}
		url := s.previewURL(ctx, env, p.Port)
		p.PreviewUrl = &url
	}
	return l
}

// lookupEnvironment is the environment name names, or 404.
func (s *Server) lookupEnvironment(ctx context.Context, name string) (environment.Environment, *apiError) {
	subject := fmt.Sprintf("environment %q", clip(name))
	if s.d.Environments == nil {
		return environment.Environment{}, environmentNotFound(subject)
	}
	e, ok := s.d.Environments.Inspect(ctx, name)
	if !ok {
		return environment.Environment{}, environmentNotFound(subject)
	}
	return e, nil
}

// portNumber is a port path parameter as a port; the spec holds it to
// 1..65535 before any handler runs, checked again here all the same.
func portNumber(p int) (uint16, *apiError) {
	if p < 1 || p > 65535 {
		return 0, badRequest("parameter port: a TCP port, 1 to 65535")
	}
	return uint16(p), nil
}

// publicPortsError maps an error of the public marks store.
func publicPortsError(err error, subject string) *apiError {
	if errors.Is(err, ports.ErrTooManyPublicPorts) {
		return newError(http.StatusConflict, "too_many_public_ports",
			"%s: at most %d ports of an environment may be public at once; make one private first (DELETE …/ports/{port}/public)",
			subject, ports.MaxPublicPortsPerEnvironment)
	}
	return newError(http.StatusServiceUnavailable, "store_unavailable", "%s: the public marks could not be saved: %v", subject, err)
}

// MakePortPublic implements restapi.StrictServerInterface: anyone may
// open the port's preview URL until the mark ends.
func (s *Server) MakePortPublic(ctx context.Context, req restapi.MakePortPublicRequestObject) (restapi.MakePortPublicResponseObject, error) {
	e, apiErr := s.lookupEnvironment(ctx, req.Name)
	if apiErr != nil {
		return nil, apiErr
	}
	port, apiErr := portNumber(req.Port)
	if apiErr != nil {
		return nil, apiErr
	}
	ttl := ports.DefaultPublicFor
	if req.Body != nil && req.Body.TtlSeconds != nil {
		ttl = time.Duration(*req.Body.TtlSeconds) * time.Second
	}
	if ttl < time.Minute || ttl > ports.MaxPublicFor {
		return nil, badRequest("field ttl_seconds: from 60 to %d (30 days)", int(ports.MaxPublicFor/time.Second))
	}
	subject := fmt.Sprintf("port %d of environment %q", port, clip(e.Name))
	if s.d.PublicPorts == nil {
		return nil, newError(http.StatusServiceUnavailable, "store_unavailable", "%s: this server keeps no public ports", subject)
	}
	until := s.clock.Now().Add(ttl).UTC()
	if err := s.d.PublicPorts.SetPublic(e.Name, port, until); err != nil {
		return nil, publicPortsError(err, subject)
	}
	s.d.Changes.Changed(ports.ChangePorts)
	s.log.InfoContext(ctx, "rest: port made public", "environment", e.Name, "port", port, "until", until)
	return restapi.MakePortPublic200JSONResponse{Port: int(port), Public: true, PublicUntil: until}, nil
}

// MakePortPrivate implements restapi.StrictServerInterface.
func (s *Server) MakePortPrivate(ctx context.Context, req restapi.MakePortPrivateRequestObject) (restapi.MakePortPrivateResponseObject, error) {
	e, apiErr := s.lookupEnvironment(ctx, req.Name)
	if apiErr != nil {
		return nil, apiErr
	}
	port, apiErr := portNumber(req.Port)
	if apiErr != nil {
		return nil, apiErr
	}
	if s.d.PublicPorts != nil {
		if err := s.d.PublicPorts.SetPrivate(e.Name, port); err != nil {
			return nil, publicPortsError(err, fmt.Sprintf("port %d of environment %q", port, clip(e.Name)))
		}
		s.d.Changes.Changed(ports.ChangePorts)
		s.log.InfoContext(ctx, "rest: port made private", "environment", e.Name, "port", port)
	}
	return restapi.MakePortPrivate204Response{}, nil
}

// forgetPublicPorts drops the public marks of a deleted environment, so a
// new environment of the same name starts with every port private.
func (s *Server) forgetPublicPorts(name string) {
	if s.d.PublicPorts == nil {
		return
	}
	if err := s.d.PublicPorts.ForgetEnvironment(name); err != nil {
		s.log.Warn("rest: the deleted environment's public ports are still marked", "environment", name, "err", err)
		return
	}
	s.d.Changes.Changed(ports.ChangePorts)
}
