package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

type wsFrame struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	Offset    uint64 `json:"offset"`
	Data      string `json:"data"`
	Encoding  string `json:"encoding"`
	Role      string `json:"role"`
	State     string `json:"state"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	From      uint64 `json:"from"`
	To        uint64 `json:"to"`
	Sessions  []struct {
		SessionID string `json:"session_id"`
		State     string `json:"state"`
	} `json:"sessions"`
}

type wsConn struct{ *websocket.Conn }

func dialTerm(srv *harness.Server) (*wsConn, error) {
	_, port, _ := strings.Cut(srv.AgentAddr(), ":")
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+srv.Token)
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 64 << 10, WriteBufferSize: 4 << 10}
	c, _, err := d.Dial(fmt.Sprintf("ws://127.0.0.1:%d/ws", p+1), h)
	if err != nil {
		return nil, err
	}
	return &wsConn{c}, nil
}

func (c *wsConn) next(deadline time.Time) (wsFrame, error) {
	var f wsFrame
	_ = c.SetReadDeadline(deadline)
	_, raw, err := c.ReadMessage()
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return f, err
	}
	if f.Type == "error" {
		return f, fmt.Errorf("error frame %s: %s", f.Code, f.Message)
	}
	return f, nil
}

// waitType reads frames until one of type typ (others are dropped).
func (c *wsConn) waitType(typ string, deadline time.Time) (wsFrame, error) {
	for {
		f, err := c.next(deadline)
		if err != nil || f.Type == typ {
			return f, err
		}
	}
}

func (c *wsConn) create(typ, command string, args []string, deadline time.Time) (string, error) {
	if err := c.WriteJSON(map[string]any{"type": "create_session", "id": "c", "agent_id": "host-01",
		"session_type": typ, "command": command, "args": args, "cols": 200, "rows": 50, "pty": true}); err != nil {
		return "", err
	}
	f, err := c.waitType("session_started", deadline)
	return f.SessionID, err
}

// echo returns the two halves of one keystroke round trip in session id:
// input sends a byte, readBack waits for its echo. A terminal redraws around
// the echo (cursor moves, attributes; tmux's client all the more), so the
// echo is the first frame after the input whose printable text holds the
// byte. In steady state each echo is one frame of its own; the warm-up
// absorbs the first screen draw.
func (c *wsConn) echo(id string, deadline time.Time) (input, readBack func(b byte) error) {
	input = func(b byte) error {
		return c.WriteJSON(map[string]any{"type": "input", "session_id": id, "data": string([]byte{b})})
	}
	readBack = func(b byte) error {
		for {
			f, err := c.next(deadline)
			if err != nil {
				return err
			}
			if f.SessionID != id {
				continue
			}
			switch f.Type {
			case "output":
				if bytes.IndexByte(stripEscapes([]byte(f.Data)), b) >= 0 {
					return nil
				}
			case "session_exited":
				return errors.New("session exited")
			}
		}
	}
	return input, readBack
}

// stripEscapes drops terminal escape sequences (CSI, OSC, two-byte ESC) and
// control bytes, leaving the text a terminal would print. A sequence cut
// between two frames is not handled: tmux writes whole sequences.
func stripEscapes(b []byte) []byte {
	out := b[:0:0]
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == 0x1b && i+1 < len(b) && b[i+1] == '[':
			i += 2
			for i < len(b) && (b[i] < 0x40 || b[i] > 0x7e) {
				i++
			}
		case c == 0x1b && i+1 < len(b) && b[i+1] == ']':
			for i < len(b) && b[i] != 0x07 && !(b[i] == 0x1b && i+1 < len(b) && b[i+1] == '\\') {
				i++
			}
			if i < len(b) && b[i] == 0x1b {
				i++
			}
		case c == 0x1b:
			i++
		case c < 0x20 || c == 0x7f:
		default:
			out = append(out, c)
		}
	}
	return out
}
