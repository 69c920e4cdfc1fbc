package specfuzz

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/agentic-sandbox/agentic-sandbox/internal/apicontract"
)

// MaxBodyBytes is the spec's bound on a JSON request body (TooLarge).
const MaxBodyBytes = 1 << 20

var decoders sync.Once

// registerDecoders lets kin-openapi read the media types the spec uses
// that it does not know: tar archives and event streams are bytes, and a
// YAML manifest is the string the spec declares, not the object it holds.
func registerDecoders() {
	decoders.Do(func() {
		openapi3filter.RegisterBodyDecoder("application/x-tar", openapi3filter.FileBodyDecoder)
		openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
		openapi3filter.RegisterBodyDecoder("application/yaml", openapi3filter.PlainBodyDecoder)
		openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
	})
}

// Answer is what the server said to a case. A stream (text/event-stream)
// is judged by its status and headers: its body is not read to the end.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Judge decides whether answers keep the contract.
type Judge struct {
	Doc *openapi3.T
	// Semantic lists, by operation id, the 400 codes a request the schema
	// allows may still get: refusals that depend on more than the request's
	// shape (a signal's name, a path that names a directory, a manifest's
	// meaning), which no schema can say. An entry is a code, or a code and
	// the start of the message ("invalid_request:field env: variable name").
	Semantic map[string][]string
}

// NewJudge judges against the spec the server serves.
func NewJudge(semantic map[string][]string) (*Judge, error) {
	registerDecoders()
	doc, _, err := apicontract.Spec()
	if err != nil {
		return nil, err
	}
	return &Judge{Doc: doc, Semantic: semantic}, nil
}

// Valid says why the spec forbids the case's request (nil: it allows it).
// Beyond the schemas: a query parameter the operation does not declare is
// refused (openapi.yaml's description says so), and a JSON body is at most
// MaxBodyBytes.
func (j *Judge) Valid(c Case) error {
	declared := map[string]bool{}
	for _, p := range params(c.Op) {
		if p.In == openapi3.ParameterInQuery {
			declared[p.Name] = true
		}
	}
	for name := range c.Query {
		if !declared[name] {
			return fmt.Errorf("query parameter %q is not declared", name)
		}
	}
	if c.ContentType == "application/json" && len(c.Body) > MaxBodyBytes {
		return fmt.Errorf("body of %d bytes is over %d", len(c.Body), MaxBodyBytes)
	}
	req, err := http.NewRequest(c.Op.Method, "http://spec"+c.URL(), bytes.NewReader(c.Body))
	if err != nil {
		return err
	}
	req.Header = c.Header.Clone()
	if c.HasBody {
		req.Header.Set("Content-Type", c.ContentType)
	}
	in := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: c.PathParams,
		Route:      &routers.Route{Spec: j.Doc, Path: c.Op.Path, PathItem: c.Op.Item, Method: c.Op.Method, Operation: c.Op.Op},
		Options:    &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		return err
	}
	// kin-openapi takes trailing data after a JSON value; JSON does not.
	if c.HasBody && c.ContentType == "application/json" {
		dec := json.NewDecoder(bytes.NewReader(c.Body))
		var v any
		if err := dec.Decode(&v); err == nil {
			if _, err := dec.Token(); err != io.EOF {
				return fmt.Errorf("data after the JSON value")
			}
		}
	}
	return nil
}

// Problems lists how the answer to c (sent as req) breaks the contract:
// a server error, a status or body the operation does not declare, a
// success for a request the spec forbids, or a refusal as malformed
// (400, 413) of one it allows.
func (j *Judge) Problems(c Case, req *http.Request, a Answer) []string {
	var out []string
	switch {
	case a.Status >= 500 && a.Status != http.StatusBadGateway && a.Status != http.StatusServiceUnavailable:
		out = append(out, fmt.Sprintf("server error %d", a.Status))
	}
	if err := apicontract.CheckResponse(req, a.Status, a.Header, a.Body); err != nil {
		out = append(out, err.Error())
	}
	verr := j.Valid(c)
	switch {
	case verr != nil && a.Status < 300:
		out = append(out, fmt.Sprintf("answered %d to a request the spec forbids (%v)", a.Status, verr))
	case verr == nil && a.Status == http.StatusRequestEntityTooLarge:
		out = append(out, "answered 413 to a request the spec allows")
	case verr == nil && a.Status == http.StatusBadRequest:
		var e struct{ Code, Error string }
		_ = json.Unmarshal(a.Body, &e)
		if !j.semantic(c.Op.Name(), e.Code, e.Error) {
			out = append(out, fmt.Sprintf("answered 400 %s to a request the spec allows: %s", e.Code, e.Error))
		}
	}
	return out
}

func (j *Judge) semantic(op, code, msg string) bool {
	for _, allowed := range j.Semantic[op] {
		c, prefix, _ := strings.Cut(allowed, ":")
		if c == code && strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}
