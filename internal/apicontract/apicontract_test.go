package apicontract

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheckResponse(t *testing.T) {
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	for _, c := range []struct {
		name, method, path string
		status             int
		header             http.Header
		body               string
		wantErr            string // "" for none
	}{
		{"an error as the contract has it", "GET", "/no/such/route", 404, jsonHeader, `{"error":"not found","code":"not_found"}`, ""},
		{"an error not in JSON", "GET", "/no/such/route", 404, http.Header{"Content-Type": {"text/plain"}}, "not found", "content type"},
		{"an error with a code not in snake_case", "GET", "/no/such/route", 404, jsonHeader, `{"error":"x","code":"NotFound"}`, "snake_case"},
		{"an error with more than error and code", "GET", "/no/such/route", 404, jsonHeader, `{"error":"x","code":"x","detail":1}`, "exactly"},
		{"a success on an operation the contract lacks", "GET", "/api/v1/no-such-thing", 200, jsonHeader, `{}`, "not in openapi.yaml"},
		{"a status the operation does not declare", "GET", "/api/v1/agents", 418, jsonHeader, `{"error":"x","code":"teapot"}`, "breaks openapi.yaml"},
		// An id with a slash, escaped in its path segment, names the
		// operation on it, as the server routes it: a mission of aiwg
		// serve's may have any id.
		{"a success on an id with an escaped slash", "GET", "/api/v1/missions/cLd~C%25%2F2", 200, jsonHeader, `{"mission_id":"cLd~C%/2"}`, "doesn't match schema"},
		{"an undeclared status on an id with an escaped slash", "GET", "/api/v1/missions/a%2fb", 418, jsonHeader, `{"error":"x","code":"teapot"}`, "status is not supported"},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		err := CheckResponse(req, c.status, c.header, []byte(c.body))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.wantErr)
		}
	}
}

func TestSpecLoads(t *testing.T) {
	doc, router, err := Spec()
	if err != nil || doc == nil || router == nil || len(doc.Paths.Map()) == 0 {
		t.Fatalf("Spec: %v, %v, %v", doc, router, err)
	}
}
