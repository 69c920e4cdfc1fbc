package agentd

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

// Permission prompts: a command started with PermissionPrompts (claude
// with --permission-prompt-tool) gets a socket of its own, named by
// AGENTIC_PERMISSION_SOCKET. PermissionHelperArg makes this binary the MCP
// server claude starts for its prompts; each prompt goes through the
// socket to the agent, over the agent link to the server (a HITL request
// there), and the operator's decision comes back the same way.

// PermissionHelperArg is the first argument that makes the agent binary
// the MCP permission server.
const PermissionHelperArg = "__agentic-permission"

// The environment a command with permission prompts gets.
const (
	EnvPermissionSocket = "AGENTIC_PERMISSION_SOCKET"
	EnvAgentExe         = "AGENTIC_AGENT_EXE"
	// EnvMCPConfig is claude's --mcp-config for the permission tool, so a
	// script (a mission's objective) can run
	// claude --permission-prompt-tool mcp__agentic__permission --mcp-config "$AGENTIC_MCP_CONFIG".
	EnvMCPConfig = "AGENTIC_MCP_CONFIG"
)

// permissionWire is one line on the socket, each way.
type permissionWire struct {
	ToolName string          `json:"tool_name,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
	Allow    bool            `json:"allow,omitempty"`
	Message  string          `json:"message,omitempty"`
}

// permissions holds the requests waiting for the server's decision; each
// is sent again on every new connection, so a restarted server asks again.
type permissions struct {
	mu      sync.Mutex
	waiting map[string]chan *sandboxv1.PermissionDecision
	asked   map[string]*sandboxv1.PermissionRequest
	seq     atomic.Int64

	// dir holds every command's socket, made once (a directory per
	// mission, in a listable /tmp, named each socket for anyone to find).
	dirOnce sync.Once
	dir     string
	dirErr  error
}

// socketDir is the agent's permission socket directory, 0711: a command's
// user reaches its socket by its unguessable name and cannot list others.
func (p *permissions) socketDir() (string, error) {
	p.dirOnce.Do(func() {
		p.dir, p.dirErr = os.MkdirTemp("", "agentic-perm-")
		if p.dirErr == nil {
			// The command may run as another user: it must reach the socket.
			if p.dirErr = os.Chmod(p.dir, 0o711); p.dirErr != nil { //nolint:gosec // traverse only, for the command's user
				_ = os.RemoveAll(p.dir)
			}
		}
	})
	return p.dir, p.dirErr
}

// removeDir removes the socket directory once the agent stops.
func (p *permissions) removeDir() {
	p.dirOnce.Do(func() {}) // none made after this
	if p.dir != "" && p.dirErr == nil {
		_ = os.RemoveAll(p.dir)
	}
}

// pending is every request still waiting, to send again.
func (p *permissions) pending() []*sandboxv1.PermissionRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*sandboxv1.PermissionRequest, 0, len(p.asked))
	for _, r := range p.asked {
		out = append(out, r)
	}
	return out
}

func (p *permissions) deliver(d *sandboxv1.PermissionDecision) {
	p.mu.Lock()
	ch := p.waiting[d.GetRequestId()]
	delete(p.waiting, d.GetRequestId())
	p.mu.Unlock()
	if ch != nil {
		ch <- d
	}
}

// permissionSocket listens for commandID's permission requests on a socket
// of its own, named unguessably in the agent's socket directory, that the
// command's user can reach; stop closes and removes it.
func (a *Agent) permissionSocket(commandID string) (path string, stop func(), err error) {
	dir, err := a.perms.socketDir()
	if err != nil {
		return "", nil, err
	}
	var name [16]byte
	if _, err := rand.Read(name[:]); err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, hex.EncodeToString(name[:])+".sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		return "", nil, err
	}
	if err := os.Chmod(path, 0o666); err != nil { //nolint:gosec // the socket is for the command's user
		_ = ln.Close()
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go a.servePermission(ctx, commandID, conn)
		}
	}()
	// Closing a unix listener removes its socket file.
	return path, func() { cancel(); _ = ln.Close() }, nil
}

// maxOpenPermissions bounds the questions one command has open at once
// (claude asks one at a time).
const maxOpenPermissions = 8

// servePermission forwards one request and writes back the decision; a
// request that finds no answer (the command ended) is denied.
func (a *Agent) servePermission(ctx context.Context, commandID string, conn net.Conn) {
	defer conn.Close()
	line, err := bufio.NewReaderSize(io.LimitReader(conn, 1<<20), 64<<10).ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return
	}
	var req permissionWire
	if json.Unmarshal(line, &req) != nil || req.ToolName == "" {
		_ = json.NewEncoder(conn).Encode(permissionWire{Message: "malformed permission request"})
		return
	}
	id := commandID + "-" + strconv.FormatInt(a.perms.seq.Add(1), 10)
	ch := make(chan *sandboxv1.PermissionDecision, 1)
	ask := &sandboxv1.PermissionRequest{CommandId: commandID, RequestId: id, ToolName: req.ToolName, InputJson: string(req.Input)}
	a.perms.mu.Lock()
	if a.perms.waiting == nil {
		a.perms.waiting = map[string]chan *sandboxv1.PermissionDecision{}
		a.perms.asked = map[string]*sandboxv1.PermissionRequest{}
	}
	open := 0
	for _, r := range a.perms.asked {
		if r.GetCommandId() == commandID {
			open++
		}
	}
	if open >= maxOpenPermissions {
		// A workload flooding the socket cannot flood the operator's inbox.
		a.perms.mu.Unlock()
		_ = json.NewEncoder(conn).Encode(permissionWire{Message: "too many open permission questions"})
		return
	}
	a.perms.waiting[id] = ch
	a.perms.asked[id] = ask
	a.perms.mu.Unlock()
	defer func() {
		a.perms.mu.Lock()
		delete(a.perms.waiting, id)
		delete(a.perms.asked, id)
		a.perms.mu.Unlock()
	}()
	a.out.pushNow(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_PermissionRequest{PermissionRequest: ask}})
	select {
	case d := <-ch:
		_ = json.NewEncoder(conn).Encode(permissionWire{Allow: d.GetAllow(), Message: d.GetMessage()})
	case <-ctx.Done():
		_ = json.NewEncoder(conn).Encode(permissionWire{Message: "the command ended"})
	}
}

// permissionInput is what claude's permission prompt tool is given.
type permissionInput struct {
	ToolName  string         `json:"tool_name" jsonschema:"the tool claude wants to use"`
	Input     map[string]any `json:"input" jsonschema:"the input it wants to give the tool"`
	ToolUseID string         `json:"tool_use_id,omitempty" jsonschema:"the id of the tool use"`
}

// ServePermissionPrompts is the MCP server (stdio) claude starts for its
// permission prompts: one tool, "permission", whose answer is claude's
// {"behavior":"allow","updatedInput":…} or {"behavior":"deny","message":…}.
func ServePermissionPrompts(ctx context.Context, socket string) error {
	server := mcp.NewServer(&mcp.Implementation{Name: "agentic-sandbox", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "permission", Description: "Ask the operator whether a tool may be used."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in permissionInput) (*mcp.CallToolResult, any, error) {
			allow, msg, err := askPermission(ctx, socket, in)
			answer := map[string]any{"behavior": "deny", "message": msg}
			switch {
			case err != nil:
				answer["message"] = "no answer: " + err.Error()
			case allow:
				answer = map[string]any{"behavior": "allow", "updatedInput": in.Input}
			}
			b, _ := json.Marshal(answer)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil, nil
		})
	return server.Run(ctx, &mcp.StdioTransport{})
}

func askPermission(ctx context.Context, socket string, in permissionInput) (bool, string, error) {
	if socket == "" {
		return false, "", fmt.Errorf("%s is not set", EnvPermissionSocket)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return false, "", err
	}
	defer conn.Close()
	input, _ := json.Marshal(in.Input)
	if err := json.NewEncoder(conn).Encode(permissionWire{ToolName: in.ToolName, Input: input}); err != nil {
		return false, "", err
	}
	// An operator may take a while; claude waits as long as this does.
	_ = conn.SetReadDeadline(time.Now().Add(24 * time.Hour))
	var out permissionWire
	if err := json.NewDecoder(conn).Decode(&out); err != nil {
		return false, "", err
	}
	return out.Allow, out.Message, nil
}
