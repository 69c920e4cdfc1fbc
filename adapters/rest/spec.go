package rest

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// specRoute is one operation of openapi.yaml as the checks every request
// passes need it: the parameters are checked against the spec itself, so
// that a limit written there is the limit the server keeps.
type specRoute struct {
	route      *routers.Route
	pathParams []string
	// params are the operation's parameters, the path item's first.
	params     []*openapi3.Parameter
	query      map[string]bool
	queryNames string
	// body is the JSON request body's schema (nil: none, or not JSON).
	body *openapi3.Schema
}

// specRoutes maps each route pattern ("GET /api/v1/agents/{agent_id}") to
// its operation.
var specRoutes = sync.OnceValue(func() map[string]*specRoute {
	doc, err := restapi.GetSpec()
	if err != nil {
		panic(fmt.Sprintf("rest: the embedded openapi.yaml does not load: %v", err))
	}
	doc.Servers = nil
	out := map[string]*specRoute{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			sr := &specRoute{
				route: &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op},
				query: map[string]bool{},
			}
			for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
				for _, ref := range list {
					sr.params = append(sr.params, ref.Value)
					switch p := ref.Value; p.In {
					case openapi3.ParameterInQuery:
						sr.query[p.Name] = true
					case openapi3.ParameterInPath:
						sr.pathParams = append(sr.pathParams, p.Name)
					}
				}
			}
			names := make([]string, 0, len(sr.query))
			for n := range sr.query {
				names = append(names, n)
			}
			sort.Strings(names)
			sr.queryNames = strings.Join(names, ", ")
			if rb := op.RequestBody; rb != nil && rb.Value != nil {
				if mt := rb.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
					sr.body = mt.Schema.Value
				}
			}
			out[method+" "+path] = sr
		}
	}
	return out
})

// checkParams refuses a request whose query has a parameter the operation
// does not declare (400 unknown_parameter), or whose path, query or header
// parameters break their schema in openapi.yaml (400 invalid_request, or
// the parameter's x-error-code). Every operation passes it.
func (s *Server) checkParams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sr := specRoutes()[r.Pattern]
		if sr == nil {
			next.ServeHTTP(w, r)
			return
		}
		if apiErr := sr.checkParams(r); apiErr != nil {
			_ = apiErr.write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (sr *specRoute) checkParams(r *http.Request) *apiError {
	q := r.URL.Query()
	names := make([]string, 0, len(q))
	for n := range q {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !sr.query[n] {
			if len(sr.query) == 0 {
				return newError(http.StatusBadRequest, "unknown_parameter", "unknown query parameter %q: this operation takes none", clip(n))
			}
			return newError(http.StatusBadRequest, "unknown_parameter", "unknown query parameter %q (known: %s)", clip(n), sr.queryNames)
		}
	}
	pathParams := make(map[string]string, len(sr.pathParams))
	for _, n := range sr.pathParams {
		pathParams[n] = r.PathValue(n)
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: pathParams, Route: sr.route}
	var err error
	for _, p := range sr.params {
		if err = openapi3filter.ValidateParameter(r.Context(), in, p); err != nil {
			break
		}
	}
	if err == nil {
		return nil
	}
	var re *openapi3filter.RequestError
	if !errors.As(err, &re) || re.Parameter == nil {
		return badRequest("%v", err)
	}
	p := re.Parameter
	code := "invalid_request"
	if c, ok := p.Extensions["x-error-code"].(string); ok {
		code = c
	}
	what := "parameter " + p.Name
	if p.In == openapi3.ParameterInHeader {
		what = "header " + p.Name
	}
	return newError(http.StatusBadRequest, code, "%s: %s", what, reason(re.Err, re.Reason))
}

// checkSchema checks a decoded JSON body against its operation's schema in
// openapi.yaml: lengths, ranges, patterns, enums, unknown members, nulls.
func checkSchema(pattern string, v any) *apiError {
	sr := specRoutes()[pattern]
	if sr == nil || sr.body == nil {
		return nil
	}
	err := sr.body.VisitJSON(v)
	if err == nil {
		return nil
	}
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		if ptr := se.JSONPointer(); len(ptr) > 0 {
			return badRequest("field %s: %s", strings.Join(ptr, "."), se.Reason)
		}
		return badRequest("the request body: %s", se.Reason)
	}
	return badRequest("%v", err)
}

// reason is what is wrong with a parameter, without kin-openapi's framing.
func reason(err error, fallback string) string {
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		return clip(se.Reason)
	}
	if err != nil {
		return clip(err.Error())
	}
	return fallback
}
