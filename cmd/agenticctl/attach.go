package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"golang.org/x/term"
)

const attachUsage = `agenticctl attach [flags] SESSION

Attach this terminal to a session through the client WebSocket: keys go to
the session (as controller, if nobody else controls it), its output comes
here, and a change of this terminal's size resizes it. The detach key
(default Ctrl-]) leaves the session running; the session ending ends attach
with its exit code.
`

// attachOptions are attach's flags.
type attachOptions struct {
	detachKey string
	observe   bool
	from      int64
	ws        string
}

func (c *cli) attach(args []string) int {
	var o attachOptions
	flags := c.flagSet("agenticctl attach")
	flags.StringVar(&o.detachKey, "detach-key", "ctrl-]", "key that detaches: ctrl-<char>, or none")
	flags.BoolVar(&o.observe, "observe", false, "watch only, as an observer")
	flags.Int64Var(&o.from, "from", -1, "replay the session log from this byte offset (default: live output only, after a redraw)")
	flags.StringVar(&o.ws, "ws", "", "client WebSocket URL (env AGENTIC_WS; default: the REST port - 1, path /ws)")
	if code, ok := c.operands(flags, attachUsage, args, 1, "attach takes one session id; run 'agenticctl attach --help'"); !ok {
		return code
	}
	detach, wsURL, token, err := c.terminalSetup(o)
	if err != nil {
		return c.fail("%v", err)
	}
	role := "controller"
	if o.observe {
		role = "observer"
	}
	join := attachFrame{Type: "join_session", ID: "join", SessionID: flags.Arg(0), Role: role}
	if o.from >= 0 {
		from := uint64(o.from)
		join.ReplayFrom = &from
	}
	return c.attachTo(wsURL, token, join, detach, o)
}

// terminalSetup is what attach and shell need before their first frame:
// the detach key's byte, the client WebSocket's URL and the token.
func (c *cli) terminalSetup(o attachOptions) (detach int, wsURL, token string, err error) {
	if detach, err = parseDetachKey(o.detachKey); err != nil {
		return 0, "", "", err
	}
	_, server, err := c.client()
	if err != nil {
		return 0, "", "", err
	}
	if wsURL, err = c.wsURL(o.ws, server); err != nil {
		return 0, "", "", err
	}
	if token, err = c.resolveToken(); err != nil {
		return 0, "", "", err
	}
	return detach, wsURL, token, nil
}

// parseDetachKey maps "ctrl-X" to its control byte; "none" is -1.
func parseDetachKey(s string) (int, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "none" || s == "" {
		return -1, nil
	}
	rest, ok := strings.CutPrefix(s, "ctrl-")
	if !ok || len(rest) != 1 || rest[0] < '@' || rest[0] > '~' {
		return 0, fmt.Errorf("detach key %q: want ctrl-<char> such as ctrl-] or ctrl-q, or none", s)
	}
	return int(strings.ToUpper(rest)[0] & 0x1f), nil
}

// detachName is how the detach key is shown: "Ctrl-]", or "no key".
func detachName(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "none" || s == "" {
		return "no key"
	}
	return "Ctrl-" + strings.ToUpper(strings.TrimPrefix(s, "ctrl-"))
}

// wsURL is --ws, else AGENTIC_WS, else the REST server's host with port-1.
func (c *cli) wsURL(flagValue, server string) (string, error) {
	if flagValue == "" {
		flagValue = c.env("AGENTIC_WS")
	}
	if flagValue != "" {
		return flagValue, nil
	}
	u, err := url.Parse(server)
	if err != nil {
		return "", err
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", fmt.Errorf("server URL %q has no port to derive the WebSocket port from; pass --ws", server)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 2 {
		return "", fmt.Errorf("server URL %q: bad port; pass --ws", server)
	}
	scheme := "ws"
	if u.Scheme == "https" {
		scheme = "wss"
	}
	return fmt.Sprintf("%s://%s/ws", scheme, net.JoinHostPort(host, strconv.Itoa(p-1))), nil
}

type attachFrame struct {
	Type      string `json:"type"`
	ID        string `json:"id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	Role      string `json:"role,omitempty"`
	Data      string `json:"data,omitempty"`
	Encoding  string `json:"encoding,omitempty"`
	Offset    uint64 `json:"offset,omitempty"`
	Cols      int    `json:"cols,omitempty"`
	Rows      int    `json:"rows,omitempty"`
	State     string `json:"state,omitempty"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Code      string `json:"code,omitempty"`
	Message   string `json:"message,omitempty"`
	From      uint64 `json:"from,omitempty"`
	// What start_shell and create_session send.
	AgentID     string            `json:"agent_id,omitempty"`
	Name        string            `json:"name,omitempty"`
	SessionType string            `json:"session_type,omitempty"`
	Command     string            `json:"command,omitempty"`
	Args        []string          `json:"args,omitempty"`
	Cwd         string            `json:"cwd,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	To          uint64            `json:"to,omitempty"`
	// ReplayFrom is a pointer: 0 is a real offset.
	ReplayFrom *uint64 `json:"replay_from,omitempty"`
}

// attachTo opens the client WebSocket, sends open — join_session for an
// existing session, or start_shell / create_session to make one (its id
// comes back in session_started) — and then plays the terminal until the
// session ends (its exit code), the detach key (0) or an error (1).
func (c *cli) attachTo(wsURL, token string, open attachFrame, detach int, o attachOptions) int {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set("User-Agent", "agenticctl")
	ws, resp, err := websocket.DefaultDialer.Dial(wsURL, h)
	if err != nil {
		if resp != nil {
			return c.fail("WebSocket %s: %s", wsURL, resp.Status)
		}
		return c.fail("WebSocket %s: %v", wsURL, err)
	}
	defer func() { _ = ws.Close() }() // the session goes on; nothing to do if the close fails

	var wmu sync.Mutex
	send := func(f attachFrame) error {
		wmu.Lock()
		defer wmu.Unlock()
		return ws.WriteJSON(f)
	}

	// A terminal on stdin goes raw: every key reaches the session as typed.
	stdinFile, isFile := c.stdin.(*os.File)
	tty := isFile && term.IsTerminal(int(stdinFile.Fd()))
	var size func() (int, int, bool)
	if tty {
		state, err := term.MakeRaw(int(stdinFile.Fd()))
		if err != nil {
			return c.fail("raw mode: %v", err)
		}
		defer func() { _ = term.Restore(int(stdinFile.Fd()), state) }() // best effort: the process ends next
		size = func() (int, int, bool) {
			w, h, err := term.GetSize(int(stdinFile.Fd()))
			return w, h, err == nil && w > 0 && h > 0
		}
	}
	nl := "\n"
	if tty {
		nl = "\r\n" // raw mode: no output processing
	}
	// A session made here starts at this terminal's size.
	if open.Type != "join_session" && size != nil {
		if w, h, ok := size(); ok && w <= 1000 && h <= 1000 {
			open.Cols, open.Rows = w, h
		}
	}
	if err := send(open); err != nil {
		return c.fail("%s: %v", open.Type, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan int, 2)
	// id is the session's; ready is closed once it is known (at once for
	// join_session, with session_started for a session made here).
	id := open.SessionID
	ready := make(chan struct{})
	if id != "" {
		close(ready)
	}

	// Output, role and end of the session.
	go func() {
		for {
			var f attachFrame
			if err := ws.ReadJSON(&f); err != nil {
				if ctx.Err() == nil {
					fmt.Fprintf(c.stderr, "%s[agenticctl: connection closed: %v]%s", nl, err, nl)
					result <- exitError
				}
				return
			}
			switch f.Type {
			case "session_started":
				if f.ID == open.ID && id == "" {
					id = f.SessionID
					close(ready)
					what := "session"
					if open.Type == "start_shell" {
						what = "shell"
					}
					fmt.Fprintf(c.stderr, "[agenticctl: %s %s on %s (session %s); %s detaches, leaving it running]%s",
						what, clean(f.Name), clean(f.AgentID), clean(id), detachName(o.detachKey), nl)
				}
			case "output":
				if id == "" || f.SessionID != id {
					continue
				}
				b := []byte(f.Data)
				if f.Encoding == "base64" {
					if b, err = base64.StdEncoding.DecodeString(f.Data); err != nil {
						continue
					}
				}
				_, _ = c.stdout.Write(b)
			case "gap":
				fmt.Fprintf(c.stderr, "%s[agenticctl: output %d-%d is no longer held by the server]%s", nl, f.From, f.To, nl)
			case "role_changed":
				if f.Role == "observer" && !o.observe {
					fmt.Fprintf(c.stderr, "%s[agenticctl: someone else controls this session; watching only]%s", nl, nl)
				}
				if f.ID == "join" && size != nil {
					redraw(send, id, size)
				}
			case "session_exited":
				if id == "" || f.SessionID != id {
					continue
				}
				// Its own exit code; a session killed or lost without one
				// (or with none a process can exit with) is a failure.
				code, shown := exitError, "none"
				if f.ExitCode != nil {
					shown = strconv.Itoa(*f.ExitCode)
					if *f.ExitCode >= 0 && *f.ExitCode <= 255 {
						code = *f.ExitCode
					}
				} else if f.State == "exited" {
					code, shown = 0, "0"
				}
				fmt.Fprintf(c.stderr, "%s[agenticctl: session %s %s, exit code %s]%s", nl, id, clean(f.State), shown, nl)
				result <- code
				return
			case "error":
				fmt.Fprintf(c.stderr, "%s[agenticctl: %s: %s]%s", nl, clean(f.Code), clean(f.Message), nl)
				if f.ID == open.ID {
					if hint := c.openHint(open, f.Code); hint != "" {
						fmt.Fprintf(c.stderr, "[agenticctl: %s]%s", hint, nl)
					}
					result <- exitError
					return
				}
			}
		}
	}()

	// Resizes follow this terminal.
	if size != nil {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			select {
			case <-ctx.Done():
				return
			case <-ready:
			}
			for {
				select {
				case <-ctx.Done():
					return
				case <-winch:
					if w, h, ok := size(); ok {
						_ = send(attachFrame{Type: "resize", SessionID: id, Cols: w, Rows: h})
					}
				}
			}
		}()
	}

	// Keys, until the detach key or the end of stdin; none before the
	// session exists.
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-ready:
		}
		buf := make([]byte, 4096)
		for {
			n, err := c.stdin.Read(buf)
			chunk := buf[:n]
			detached := false
			if detach >= 0 {
				if i := bytes.IndexByte(chunk, byte(detach)); i >= 0 { //nolint:gosec // parseDetachKey gives 0-31
					chunk, detached = chunk[:i], true
				}
			}
			if len(chunk) > 0 && !o.observe {
				f := attachFrame{Type: "input", SessionID: id, Data: string(chunk)}
				if !utf8.Valid(chunk) {
					f.Data, f.Encoding = base64.StdEncoding.EncodeToString(chunk), "base64"
				}
				if send(f) != nil {
					return
				}
			}
			if detached || err != nil {
				if detached {
					_ = send(attachFrame{Type: "leave_session", SessionID: id})
					fmt.Fprintf(c.stderr, "%s[agenticctl: detached from %s; it goes on. Re-attach: agenticctl attach %s]%s", nl, id, id, nl)
					result <- 0
				}
				// End of stdin: keep showing output until the session ends.
				return
			}
		}
	}()

	code := <-result
	cancel()
	wmu.Lock()
	_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	wmu.Unlock()
	return code
}

// redraw makes a full-screen program (tmux) paint its screen for a viewer
// that joined live: the size goes one row down and back, which it answers
// with a redraw.
func redraw(send func(attachFrame) error, id string, size func() (int, int, bool)) {
	w, h, ok := size()
	if !ok {
		return
	}
	_ = send(attachFrame{Type: "resize", SessionID: id, Cols: w, Rows: max(1, h-1)})
	_ = send(attachFrame{Type: "resize", SessionID: id, Cols: w, Rows: h})
}
