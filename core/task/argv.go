package task

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Argv is the process a task runs, in argv form: claude headless with
// stream-json (which -p needs --verbose for), or the manifest's command.
func Argv(m Manifest) []string {
	if m.Command != nil {
		return slices.Clone(m.Command.Argv)
	}
	c := m.Claude
	argv := []string{"claude", "-p", c.Prompt, "--output-format", "stream-json", "--verbose"}
	if c.Model != "" {
		argv = append(argv, "--model", c.Model)
	}
	if c.MaxTurns > 0 {
		argv = append(argv, "--max-turns", fmt.Sprint(c.MaxTurns))
	}
	if len(c.AllowedTools) > 0 {
		argv = append(argv, "--allowedTools", strings.Join(c.AllowedTools, ","))
	}
	if c.SkipPermissions {
		argv = append(argv, "--dangerously-skip-permissions")
	} else {
		// Each prompt goes to an operator as a HITL request.
		argv = append(argv, "--permission-prompt-tool", PermissionTool, "--mcp-config", ports.ClaudePermissionMCPConfig)
	}
	return argv
}
