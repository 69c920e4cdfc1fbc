package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

var (
	specOnce   sync.Once
	specRouter routers.Router
	specErr    error
)

// SpecRouter routes requests onto the operations of the published contract
// (restapi.Spec, the openapi.yaml the server serves). The servers list is
// dropped so that a server on any port matches.
func SpecRouter() (routers.Router, error) {
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(restapi.Spec)
		if err != nil {
			specErr = fmt.Errorf("openapi.yaml: %w", err)
			return
		}
		doc.Servers = nil
		if err := doc.Validate(loader.Context); err != nil {
			specErr = fmt.Errorf("openapi.yaml is not valid: %w", err)
			return
		}
		specRouter, specErr = legacy.NewRouter(doc)
	})
	return specRouter, specErr
}

var snakeCode = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

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
	if verr := CheckResponse(req, resp.StatusCode, resp.Header, body); verr != nil {
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

// CheckResponse validates one response against openapi.yaml; nil when it
// keeps the contract.
func CheckResponse(req *http.Request, status int, header http.Header, body []byte) error {
	var problems []string
	if status >= 400 && req.URL.Path != "/readyz" {
		if msg := checkErrorBody(header, body); msg != "" {
			problems = append(problems, msg)
		}
	}
	router, err := SpecRouter()
	if err != nil {
		return err
	}
	if route, params, ferr := router.FindRoute(req); ferr == nil {
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 status,
			Header:                 header,
			Options:                &openapi3filter.Options{IncludeResponseStatus: true},
		}
		in.SetBodyBytes(body)
		if verr := openapi3filter.ValidateResponse(context.Background(), in); verr != nil {
			problems = append(problems, verr.Error())
		}
	} else if status < 400 && strings.HasPrefix(req.URL.Path, "/api/") {
		problems = append(problems, "the operation is not in openapi.yaml: "+ferr.Error())
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s %s: response %d breaks openapi.yaml: %s\nbody: %s",
		req.Method, req.URL.Path, status, strings.Join(problems, "; "), clip(body))
}

func checkErrorBody(header http.Header, body []byte) string {
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Sprintf("error with content type %q, want application/json", ct)
	}
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil {
		return "error body is not a JSON object: " + err.Error()
	}
	msg, _ := e["error"].(string)
	code, _ := e["code"].(string)
	if msg == "" || !snakeCode.MatchString(code) || len(e) != 2 {
		return `error body is not exactly {"error": "<message>", "code": "<snake_case>"}`
	}
	return ""
}

func clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
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
