// Package apicontract checks REST responses against the published contract
// (openapi.yaml as the server serves it, restapi.Spec): one check for the
// REST adapter's tests and the end-to-end tests alike.
package apicontract

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
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
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error
)

// Spec is the contract and a router onto its operations. The servers list
// is dropped so that a server on any port matches.
func Spec() (*openapi3.T, routers.Router, error) {
	specOnce.Do(func() {
		// A streamed exec's NDJSON lines are the string the spec declares.
		openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
		// And a multipart one's parts the binary string it declares.
		openapi3filter.RegisterBodyDecoder("multipart/mixed", openapi3filter.PlainBodyDecoder)
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
		specDoc = doc
		specRouter, specErr = legacy.NewRouter(doc)
	})
	return specDoc, specRouter, specErr
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// CheckResponse validates one response against the contract: a status its
// operation declares, a body matching its schema, every error (but
// /readyz's 503, which carries its Readiness) the JSON {"error", "code"}
// with a snake_case code, and a success only on an operation the contract
// has. Nil when it keeps the contract.
func CheckResponse(req *http.Request, status int, header http.Header, body []byte) error {
	var problems []string
	if status >= 400 && req.URL.Path != "/readyz" {
		if msg := checkErrorBody(header, body); msg != "" {
			problems = append(problems, msg)
		}
	}
	_, router, err := Spec()
	if err != nil {
		return err
	}
	if route, params, ferr := findRoute(router, req); ferr == nil {
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
		req.Method, req.URL.Path, status, strings.Join(problems, "; "), Clip(body))
}

// findRoute is router.FindRoute, but a path parameter may hold an escaped
// slash (%2F), as an id another system chose (a mission's) may: the
// router matches the unescaped path, where that slash would split the
// segment, so the route is found on a copy whose parameters have no
// slash, and the parameters are taken from the escaped path.
func findRoute(router routers.Router, req *http.Request) (*routers.Route, map[string]string, error) {
	route, params, err := router.FindRoute(req)
	escaped := req.URL.EscapedPath()
	if err == nil || !strings.Contains(strings.ToUpper(escaped), "%2F") {
		return route, params, err
	}
	segs := strings.Split(escaped, "/")
	unescaped := make([]string, len(segs))
	flat := make([]string, len(segs))
	for i, seg := range segs {
		u, uerr := url.PathUnescape(seg)
		if uerr != nil {
			return nil, nil, err
		}
		unescaped[i], flat[i] = u, strings.ReplaceAll(u, "/", "_")
	}
	clone := req.Clone(req.Context())
	clone.URL.Path, clone.URL.RawPath = strings.Join(flat, "/"), ""
	route, _, ferr := router.FindRoute(clone)
	if ferr != nil {
		return nil, nil, err
	}
	params = map[string]string{}
	for i, t := range strings.Split(route.Path, "/") {
		if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") && i < len(unescaped) {
			params[t[1:len(t)-1]] = unescaped[i]
		}
	}
	return route, params, nil
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
	if msg == "" || !snakeCase.MatchString(code) || len(e) != 2 {
		return `error body is not exactly {"error": "<message>", "code": "<snake_case>"}`
	}
	return ""
}

// Clip is body shortened for a failure message.
func Clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}
