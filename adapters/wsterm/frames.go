// Package wsterm is the client WebSocket of agentic-mgmt (port+1, /ws):
// live terminals and session control for browsers and the CLI, as JSON
// frames with a "type".
package wsterm

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Client frame types.
const (
	FrameHello         = "hello"
	FrameListAgents    = "list_agents"
	FrameListSessions  = "list_sessions"
	FrameCreateSession = "create_session"
	FrameStartShell    = "start_shell"
	FrameJoinSession   = "join_session"
	FrameLeaveSession  = "leave_session"
	FrameInput         = "input"
	FrameResize        = "resize"
	FrameSignal        = "signal"
	FrameKillSession   = "kill_session"
	FramePing          = "ping"
)

// Server frame types.
const (
	FrameOutput         = "output"
	FrameSessionStarted = "session_started"
	FrameSessionExited  = "session_exited"
	FrameRoleChanged    = "role_changed"
	FrameResized        = "resized"
	FrameError          = "error"
	FramePong           = "pong"
	FrameAgents         = "agents"
	FrameSessions       = "sessions"
	FrameGap            = "gap"
)

// EncodingBase64 marks data that is not valid UTF-8.
const EncodingBase64 = "base64"

// Limits of client frames.
const (
	MaxFrameBytes = 1 << 20
	maxField      = 4096
	maxArgs       = 256
	maxDim        = 1000
)

// ClientFrame is a decoded, validated frame from a client.
type ClientFrame struct {
	Type      string            `json:"type"`
	ID        string            `json:"id,omitempty"` // echoed in answers, so clients can match them
	SessionID string            `json:"session_id,omitempty"`
	AgentID   string            `json:"agent_id,omitempty"`
	SessionTy string            `json:"session_type,omitempty"`
	Kind      string            `json:"kind,omitempty"` // alias of session_type
	Name      string            `json:"name,omitempty"`
	Command   string            `json:"command,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cols      int               `json:"cols,omitempty"`
	Rows      int               `json:"rows,omitempty"`
	PTY       *bool             `json:"pty,omitempty"` // create_session: default true
	Role      string            `json:"role,omitempty"`
	// Take, on join_session as controller, takes control from whoever holds
	// it (they become an observer and are told).
	Take bool `json:"take,omitempty"`
	// ReplayFrom is the session-log offset to start from; nil means live only.
	ReplayFrom *uint64 `json:"replay_from,omitempty"`
	Data       string  `json:"data,omitempty"`
	Encoding   string  `json:"encoding,omitempty"`
	Signal     string  `json:"signal,omitempty"`

	// Bytes is Data decoded (base64 when Encoding says so).
	Bytes []byte `json:"-"`
}

// ProtocolError is a client mistake, answered with an error frame; the
// connection lives on.
type ProtocolError struct {
	Code    string
	Message string
}

func (e *ProtocolError) Error() string { return e.Code + ": " + e.Message }

func bad(code, format string, a ...any) error {
	return &ProtocolError{Code: code, Message: fmt.Sprintf(format, a...)}
}

// DecodeClientFrame parses and validates one client frame.
func DecodeClientFrame(raw []byte) (ClientFrame, error) {
	var f ClientFrame
	if len(raw) > MaxFrameBytes {
		return f, bad("frame_too_large", "frame of %d bytes is over %d", len(raw), MaxFrameBytes)
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return f, bad("invalid_json", "frame is not a JSON object: %v", err)
	}
	if f.SessionTy == "" {
		f.SessionTy = f.Kind
	}
	for name, v := range map[string]string{"id": f.ID, "session_id": f.SessionID, "agent_id": f.AgentID, "name": f.Name, "command": f.Command, "cwd": f.Cwd, "role": f.Role, "signal": f.Signal} {
		if len(v) > maxField {
			return f, bad("invalid_frame", "%s is longer than %d bytes", name, maxField)
		}
		if strings.ContainsRune(v, 0) {
			return f, bad("invalid_frame", "%s contains a NUL byte", name)
		}
	}
	if len(f.Args) > maxArgs {
		return f, bad("invalid_frame", "more than %d args", maxArgs)
	}
	need := func(field, v string) error {
		if v == "" {
			return bad("invalid_frame", "%s frame needs %s", f.Type, field)
		}
		return nil
	}
	dims := func(required bool) error {
		if !required && f.Cols == 0 && f.Rows == 0 {
			return nil
		}
		if f.Cols < 1 || f.Cols > maxDim || f.Rows < 1 || f.Rows > maxDim {
			return bad("invalid_frame", "cols and rows must be 1..%d", maxDim)
		}
		return nil
	}
	var err error
	switch f.Type {
	case FrameHello, FrameListAgents, FrameListSessions, FramePing:
	case FrameCreateSession:
		if err = need("agent_id", f.AgentID); err == nil {
			err = need("command", f.Command)
		}
		if err == nil {
			if t := ports.SessionType(f.SessionTy); t != "" && !t.Valid() {
				err = bad("invalid_frame", "session_type must be interactive, headless or background")
			}
		}
		if err == nil {
			err = dims(false)
		}
	case FrameStartShell:
		if err = need("agent_id", f.AgentID); err == nil {
			err = dims(false)
		}
	case FrameJoinSession:
		if err = need("session_id", f.SessionID); err == nil && f.Role != "" && f.Role != "controller" && f.Role != "observer" {
			err = bad("invalid_frame", "role must be controller or observer")
		}
	case FrameLeaveSession, FrameKillSession:
		err = need("session_id", f.SessionID)
	case FrameInput:
		if err = need("session_id", f.SessionID); err == nil {
			f.Bytes, err = decodeData(f.Data, f.Encoding)
		}
	case FrameResize:
		if err = need("session_id", f.SessionID); err == nil {
			err = dims(true)
		}
	case FrameSignal:
		if err = need("session_id", f.SessionID); err == nil {
			err = need("signal", f.Signal)
		}
	case "":
		err = bad("invalid_frame", "frame has no type")
	default:
		err = bad("unknown_type", "unknown frame type %q", f.Type)
	}
	return f, err
}

func decodeData(data, encoding string) ([]byte, error) {
	switch encoding {
	case "", "utf-8":
		return []byte(data), nil
	case EncodingBase64:
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return nil, bad("invalid_frame", "data is not valid base64")
		}
		return b, nil
	default:
		return nil, bad("invalid_frame", "encoding must be utf-8 or base64")
	}
}

// OutputFrame is session output from offset on: UTF-8 text, or base64 when
// the bytes are not valid UTF-8.
type OutputFrame struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Offset    uint64 `json:"offset"`
	Data      string `json:"data"`
	Encoding  string `json:"encoding,omitempty"`
}

// NewOutputFrame encodes b for the wire.
func NewOutputFrame(sessionID string, offset uint64, b []byte) OutputFrame {
	f := OutputFrame{Type: FrameOutput, SessionID: sessionID, Offset: offset}
	if utf8.Valid(b) {
		f.Data = string(b)
	} else {
		f.Data, f.Encoding = base64.StdEncoding.EncodeToString(b), EncodingBase64
	}
	return f
}

// ErrorFrame answers a frame that could not be done.
type ErrorFrame struct {
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// NewErrorFrame turns err into an error frame (codes from ProtocolError, else internal_error).
func NewErrorFrame(id string, err error) ErrorFrame {
	var fe *ProtocolError
	if errors.As(err, &fe) {
		return ErrorFrame{Type: FrameError, ID: id, Code: fe.Code, Message: fe.Message}
	}
	return ErrorFrame{Type: FrameError, ID: id, Code: "internal_error", Message: err.Error()}
}
