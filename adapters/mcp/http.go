package mcp

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Path is where Mount serves MCP on the REST port.
const Path = "/mcp"

// HTTPOptions configure the server's MCP endpoint.
type HTTPOptions struct {
	// Token is the operator token; every request to the endpoint must
	// carry it as a bearer token. Empty refuses every request, as the REST
	// API does.
	Token   string
	Version string
	Logger  *slog.Logger
}

// Mount returns rest with MCP's streamable HTTP transport served at Path
// in front of it. A request without the operator token as a bearer token
// gets 401 {"error", "code": "unauthorized"}, as the REST API answers; the
// tools call rest in this process with the token of the request that
// carried the call, so they have exactly the REST API's checks and rights.
// The endpoint is stateless (every POST stands alone: no session to keep,
// nothing lost by a restart; GET answers 405), and keeps the SDK's DNS
// rebinding protection (a request to a loopback address must name a
// loopback host).
func Mount(rest http.Handler, o HTTPOptions) http.Handler {
	cl, err := restapi.NewClient("http://agentic-mgmt.in-process", restapi.WithHTTPClient(&http.Client{Transport: inProcess{rest}}))
	if err != nil {
		panic(err) // a constant URL
	}
	srv := NewServer(cl, Options{Version: o.Version, ForwardAuthorization: true, Logger: o.Logger})
	mcpHandler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{
		Stateless:                    true,
		Logger:                       o.Logger,
		PropagateRequestCancellation: true,
	})
	want := sha256.Sum256([]byte(o.Token))
	authorized := func(r *http.Request) bool {
		const prefix = "bearer "
		h := r.Header.Get("Authorization")
		if o.Token == "" || len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
			return false
		}
		got := sha256.Sum256([]byte(strings.TrimSpace(h[len(prefix):])))
		return subtle.ConstantTimeCompare(got[:], want[:]) == 1
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path {
			rest.ServeHTTP(w, r)
			return
		}
		if !authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentic-sandbox"`)
			writeError(w, http.StatusUnauthorized, "unauthorized",
				"missing or wrong bearer token: send 'Authorization: Bearer <operator token>' (AGENTIC_OPERATOR_TOKEN or <data dir>/operator-token) with every MCP request")
			return
		}
		mcpHandler.ServeHTTP(w, r)
	})
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(restapi.Error{Error: msg, Code: code})
}
