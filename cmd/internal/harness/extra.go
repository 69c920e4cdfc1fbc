package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/apicontract"
)

// ContractTransport checks every response it carries against openapi.yaml:
// a status the operation declares, a body that matches its schema, and for
// every error the JSON body {"error", "code"} with a snake_case code. It
// also reports a response that quotes one of Secrets. Violations go to
// Violation; the response is handed on unchanged either way.
type ContractTransport struct {
	Base http.RoundTripper
	// Violation is called once per broken response (from any goroutine).
	Violation func(error)
	// Secrets, if set, lists strings no response body may contain.
	Secrets func() []string
}

// RoundTrip implements http.RoundTripper.
func (ct *ContractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := ct.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		// A body cut short (e.g. the server was killed): nothing to judge.
		return resp, nil
	}
	if verr := apicontract.CheckResponse(req, resp.StatusCode, resp.Header, body); verr != nil {
		ct.report(verr)
	}
	if ct.Secrets != nil {
		for _, s := range ct.Secrets() {
			if s != "" && bytes.Contains(body, []byte(s)) {
				ct.report(fmt.Errorf("%s %s: response %d quotes a token", req.Method, req.URL.Path, resp.StatusCode))
			}
		}
	}
	return resp, nil
}

func (ct *ContractTransport) report(err error) {
	if ct.Violation != nil {
		ct.Violation(err)
	}
}

// ContractClient is the generated REST client of s over a ContractTransport.
// token is sent as the bearer ("" sends no Authorization header; a request
// editor may still set one).
func (s *Server) ContractClient(token string, violation func(error), secrets func() []string) *restapi.ClientWithResponses {
	hc := &http.Client{Transport: &ContractTransport{Violation: violation, Secrets: secrets}}
	opts := []restapi.ClientOption{restapi.WithHTTPClient(hc)}
	if token != "" {
		opts = append(opts, restapi.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			if r.Header.Get("Authorization") == "" {
				r.Header.Set("Authorization", "Bearer "+token)
			}
			return nil
		}))
	}
	c, err := restapi.NewClientWithResponses(s.RESTURL, opts...)
	if err != nil {
		panic(err) // only fails on a malformed URL, which Start built
	}
	return c
}

// Restart starts agentic-mgmt again on the same data dir and ports, with
// the same options; the host agents it left running are adopted.
func (s *Server) Restart() (*Server, error) {
	return Start(s.Bins, s.Opts)
}
