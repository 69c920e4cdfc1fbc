package rest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// bodyTypes says which request type each route with a JSON body takes. The
// generated decoder is lenient (unknown and mis-cased fields are ignored,
// trailing data is accepted), so checkBody decodes strictly first.
var bodyTypes = map[string]reflect.Type{
	"POST /api/v1/agents/{agent_id}/exec":       reflect.TypeFor[restapi.ExecRequest](),
	"POST /api/v1/agents/{agent_id}/commands":   reflect.TypeFor[restapi.ExecRequest](),
	"POST /api/v1/commands/{command_id}/stdin":  reflect.TypeFor[restapi.StdinRequest](),
	"POST /api/v1/commands/{command_id}/resize": reflect.TypeFor[restapi.ResizeRequest](),
	"POST /api/v1/commands/{command_id}/signal": reflect.TypeFor[restapi.SignalRequest](),
	"POST /api/v1/hitl/{hitl_id}/respond":       reflect.TypeFor[restapi.HITLResponse](),
	"POST /api/v1/agents/{agent_id}/sessions":   reflect.TypeFor[restapi.CreateSessionRequest](),
	"POST /api/v1/environments":                 reflect.TypeFor[restapi.CreateEnvironmentRequest](),
	"PUT /api/v1/pools/{name}":                  reflect.TypeFor[restapi.PoolRequest](),
	publicPortRoute:                             reflect.TypeFor[restapi.PublicPortRequest](),
	"POST /api/v1/tokens":                       reflect.TypeFor[restapi.TokenRequest](),
}

// optionalBody are the routes whose JSON body may be left out (empty): the
// schema's defaults apply then.
var optionalBody = map[string]bool{publicPortRoute: true}

const publicPortRoute = "PUT /api/v1/environments/{name}/ports/{port}/public"

// checkBody rejects a body that is too large, not JSON, not one object, or
// has unknown fields, missing required fields or fields of the wrong type,
// or breaks its schema in openapi.yaml otherwise (lengths, ranges, patterns,
// nulls), then hands the bytes on to the generated decoder. The dispatch body is
// checked by its own rules (checkDispatchBody): unknown fields pass there.
func (s *Server) checkBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Pattern == dispatchRoute {
			checkDispatchBody(w, r, next)
			return
		}
		t, ok := bodyTypes[r.Pattern]
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		body := io.Reader(r.Body)
		if optionalBody[r.Pattern] {
			raw, err := io.ReadAll(r.Body)
			if err != nil {
				var tooBig *http.MaxBytesError
				if errors.As(err, &tooBig) {
					writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body is larger than %d bytes", MaxBodyBytes))
				} else {
					_ = badRequest("reading the request body: %v", err).write(w)
				}
				return
			}
			if len(bytes.TrimSpace(raw)) == 0 {
				r.Body = http.NoBody
				next.ServeHTTP(w, r)
				return
			}
			body = bytes.NewReader(raw)
		}
		b, apiErr := readStrict(body, t)
		if apiErr == nil {
			var v any
			_ = json.Unmarshal(b, &v) // readStrict has read it
			apiErr = checkSchema(r.Pattern, v)
		}
		if apiErr != nil {
			_ = apiErr.write(w)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		next.ServeHTTP(w, r)
	})
}

func readStrict(body io.Reader, t reflect.Type) ([]byte, *apiError) {
	b, apiErr := readBody(body)
	if apiErr != nil {
		return nil, apiErr
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&fields); err != nil {
		var syn *json.SyntaxError
		switch {
		case errors.As(err, &syn):
			return nil, newError(http.StatusBadRequest, "invalid_json", "malformed JSON at byte %d: %v", syn.Offset, err)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, newError(http.StatusBadRequest, "invalid_json", "malformed JSON: the body ends too early")
		default:
			var typ *json.UnmarshalTypeError
			if errors.As(err, &typ) {
				return nil, newError(http.StatusBadRequest, "invalid_json", "the request body must be a JSON object, not %s", typ.Value)
			}
			return nil, newError(http.StatusBadRequest, "invalid_json", "malformed JSON: %v", err)
		}
	}
	if fields == nil {
		return nil, newError(http.StatusBadRequest, "invalid_json", "the request body must be a JSON object, not null")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, newError(http.StatusBadRequest, "invalid_json", "unexpected data after the JSON object")
	}
	known, required := jsonFields(t)
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !known[name] {
			return nil, badRequest("unknown field %q (known: %s)", clip(name), strings.Join(sortedKeys(known), ", "))
		}
	}
	for _, name := range sortedKeys(required) {
		if raw, ok := fields[name]; !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return nil, badRequest("field %s: required", name)
		}
	}
	v := reflect.New(t).Interface()
	if err := json.Unmarshal(b, v); err != nil {
		var typ *json.UnmarshalTypeError
		var b64 base64.CorruptInputError
		switch {
		case errors.As(err, &typ) && typ.Field != "":
			return nil, badRequest("field %s: expected %s, got %s", typ.Field, jsonKind(typ.Type), typ.Value)
		case errors.As(err, &b64):
			return nil, badRequest("field data_base64: not valid base64")
		default:
			return nil, badRequest("%v", err)
		}
	}
	return b, nil
}

// jsonFields lists the JSON member names of a generated struct, and the
// required ones: oapi-codegen marks every optional member omitempty.
func jsonFields(t reflect.Type) (known, required map[string]bool) {
	known, required = map[string]bool{}, map[string]bool{}
	for i := range t.NumField() {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		known[name] = true
		if !strings.Contains(opts, "omitempty") {
			required[name] = true
		}
	}
	return known, required
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	default:
		return fmt.Sprint(t)
	}
}
