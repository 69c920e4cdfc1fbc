// Command fakeclaude stands in for claude in tests of permission prompts:
// with --permission-prompt-tool it starts the MCP server named by
// --mcp-config, as claude does, asks it for a Bash call, and writes what
// it was told into allowed.txt or denied.txt; then it prints a result.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	var tool, config string
	args := os.Args[1:]
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--permission-prompt-tool":
			tool = args[i+1]
		case "--mcp-config":
			config = args[i+1]
		}
	}
	fmt.Println(`{"type":"system","subtype":"init","session_id":"s1","model":"fake"}`)
	if tool != "mcp__agentic__permission" || config == "" {
		fail("no permission prompt tool: " + strings.Join(args, " "))
	}
	var cfg struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(config), &cfg); err != nil {
		fail("mcp config: " + err.Error())
	}
	srv, ok := cfg.MCPServers["agentic"]
	if !ok {
		fail("no agentic server in the mcp config")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "fakeclaude", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(srv.Command, srv.Args...)}, nil)
	if err != nil {
		fail("connecting to the permission server: " + err.Error())
	}
	defer session.Close()
	fmt.Println(`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"rm -rf build"}}]},"session_id":"s1"}`)
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "permission", Arguments: map[string]any{
		"tool_name": "Bash", "input": map[string]any{"command": "rm -rf build"}, "tool_use_id": "t1",
	}})
	if err != nil || len(res.Content) == 0 {
		fail(fmt.Sprintf("permission call: %v", err))
	}
	text := res.Content[0].(*mcp.TextContent).Text
	var answer struct {
		Behavior string `json:"behavior"`
		Message  string `json:"message"`
	}
	_ = json.Unmarshal([]byte(text), &answer)
	file := "denied.txt"
	if answer.Behavior == "allow" {
		file = "allowed.txt"
	}
	if err := os.WriteFile(file, []byte(text+"\n"), 0o644); err != nil {
		fail(err.Error())
	}
	fmt.Println(`{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"done","session_id":"s1"}`)
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	b, _ := json.Marshal(msg)
	fmt.Printf(`{"type":"result","subtype":"error_during_execution","is_error":true,"result":%s}`+"\n", b)
	os.Exit(1)
}
