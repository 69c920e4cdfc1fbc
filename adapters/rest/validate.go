package rest

import (
	"strconv"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// execOptions is a validated ExecRequest.
type execOptions struct {
	spec     ports.CommandSpec
	stdin    []byte
	hasStdin bool
	maxOut   int
}

// buildSpec checks an ExecRequest against openapi's constraints and turns it
// into a CommandSpec. forExec selects the exec defaults (timeout 300 s when
// absent or 0); the commands endpoint keeps 0 = no timeout.
func buildSpec(b *restapi.ExecRequest, forExec bool) (execOptions, *apiError) {
	var o execOptions
	if b == nil {
		return o, badRequest("the request body is required")
	}
	if b.Command == "" {
		return o, badRequest("field command: must not be empty")
	}
	if strings.ContainsRune(b.Command, 0) {
		return o, badRequest("field command: must not contain NUL bytes")
	}
	o.spec.Command = b.Command
	if b.Args != nil {
		for i, a := range *b.Args {
			if strings.ContainsRune(a, 0) {
				return o, badRequest("field args[%d]: must not contain NUL bytes", i)
			}
		}
		o.spec.Args = append([]string(nil), *b.Args...)
	}
	if b.WorkingDir != nil {
		if strings.ContainsRune(*b.WorkingDir, 0) {
			return o, badRequest("field working_dir: must not contain NUL bytes")
		}
		o.spec.WorkingDir = *b.WorkingDir
	}
	if b.Env != nil {
		o.spec.Env = make(map[string]string, len(*b.Env))
		for k, v := range *b.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return o, badRequest("field env: variable name %q must be non-empty and contain neither '=' nor NUL", clip(k))
			}
			if strings.ContainsRune(v, 0) {
				return o, badRequest("field env: value of %q must not contain NUL bytes", clip(k))
			}
			o.spec.Env[k] = v
		}
	}
	if b.RunAs != nil {
		o.spec.RunAs = *b.RunAs
	}
	if b.TimeoutSeconds != nil {
		t := *b.TimeoutSeconds
		if t < 0 || t > 86400 {
			return o, badRequest("field timeout_seconds: must be between 0 and 86400, got %d", t)
		}
		o.spec.Timeout = time.Duration(t) * time.Second
	}
	if forExec && o.spec.Timeout == 0 {
		o.spec.Timeout = DefaultExecTimeout
	}
	cols, rows := 80, 24
	if b.Cols != nil {
		if *b.Cols < 1 || *b.Cols > 1000 {
			return o, badRequest("field cols: must be between 1 and 1000, got %d", *b.Cols)
		}
		cols = *b.Cols
	}
	if b.Rows != nil {
		if *b.Rows < 1 || *b.Rows > 1000 {
			return o, badRequest("field rows: must be between 1 and 1000, got %d", *b.Rows)
		}
		rows = *b.Rows
	}
	if b.Pty != nil && *b.Pty {
		o.spec.PTY = true
		o.spec.Cols, o.spec.Rows = uint16(cols), uint16(rows)
		o.spec.Term = "xterm-256color"
		if b.Term != nil && *b.Term != "" {
			o.spec.Term = *b.Term
		}
		if strings.ContainsRune(o.spec.Term, 0) {
			return o, badRequest("field term: must not contain NUL bytes")
		}
	}
	o.maxOut = DefaultMaxOutputBytes
	if b.MaxOutputBytes != nil {
		m := *b.MaxOutputBytes
		if m < 1 || m > maxMaxOutputBytes {
			return o, badRequest("field max_output_bytes: must be between 1 and %d, got %d", maxMaxOutputBytes, m)
		}
		o.maxOut = m
	}
	if b.Stdin != nil {
		o.stdin = []byte(*b.Stdin)
		o.hasStdin = true
	}
	return o, nil
}

// signalNumbers uses Linux numbering, which is what agents run on.
var signalNumbers = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "IOT": 6,
	"BUS": 7, "FPE": 8, "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12,
	"PIPE": 13, "ALRM": 14, "TERM": 15, "STKFLT": 16, "CHLD": 17, "CLD": 17,
	"CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23,
	"XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29,
	"POLL": 29, "PWR": 30, "SYS": 31, "RTMIN": 34, "RTMAX": 64,
}

// parseSignal accepts INT, SIGINT, sigint, 2, RTMIN+3, SIGRTMAX-1.
func parseSignal(s string) (int, bool) {
	s = strings.ToUpper(strings.TrimSpace(s))
	if n, err := strconv.Atoi(s); err == nil {
		return n, n >= 1 && n <= 64
	}
	s = strings.TrimPrefix(s, "SIG")
	if n, ok := signalNumbers[s]; ok {
		return n, true
	}
	for _, base := range []string{"RTMIN", "RTMAX"} {
		rest, ok := strings.CutPrefix(s, base)
		if !ok || len(rest) < 2 || (rest[0] != '+' && rest[0] != '-') {
			continue
		}
		d, err := strconv.Atoi(rest[1:])
		if err != nil || d < 0 {
			return 0, false
		}
		if rest[0] == '-' {
			d = -d
		}
		n := signalNumbers[base] + d
		return n, n >= 34 && n <= 64
	}
	return 0, false
}
