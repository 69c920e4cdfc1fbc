package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// wsViewer is a client of the terminal WebSocket that collects each
// session's output by offset.
type wsViewer struct {
	t  *testing.T
	ws *websocket.Conn

	mu     sync.Mutex
	frames []map[string]any
	out    map[string][]byte
	next   map[string]uint64
	dups   int
	notify chan struct{}
}

func dialWS(t *testing.T, s *harness.Server, token string) *wsViewer {
	t.Helper()
	u := strings.Replace(s.AgentURL, "http://", "ws://", 1)
	host, port, _ := strings.Cut(strings.TrimPrefix(u, "ws://"), ":")
	p, _ := strconv.Atoi(port)
	url := fmt.Sprintf("ws://%s:%d/ws", host, p+1)
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ws, resp, err := websocket.DefaultDialer.Dial(url, h)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		return &wsViewer{t: t, frames: []map[string]any{{"dial_error": err.Error(), "status": code}}}
	}
	v := &wsViewer{t: t, ws: ws, out: map[string][]byte{}, next: map[string]uint64{}, notify: make(chan struct{}, 1)}
	go v.read()
	t.Cleanup(func() { ws.Close() })
	return v
}

func (v *wsViewer) read() {
	for {
		_, raw, err := v.ws.ReadMessage()
		if err != nil {
			return
		}
		var f map[string]any
		if json.Unmarshal(raw, &f) != nil {
			continue
		}
		v.mu.Lock()
		v.frames = append(v.frames, f)
		if f["type"] == "output" {
			id := f["session_id"].(string)
			off := uint64(f["offset"].(float64))
			data := []byte(f["data"].(string))
			if f["encoding"] == "base64" {
				data, _ = base64.StdEncoding.DecodeString(f["data"].(string))
			}
			if off != v.next[id] {
				v.dups++ // a gap or an overlap: neither may happen here
			}
			v.out[id] = append(v.out[id], data...)
			v.next[id] = off + uint64(len(data))
		}
		v.mu.Unlock()
		select {
		case v.notify <- struct{}{}:
		default:
		}
	}
}

func (v *wsViewer) send(f map[string]any) {
	v.t.Helper()
	if err := v.ws.WriteJSON(f); err != nil {
		v.t.Fatal(err)
	}
}

// waitFor waits until a frame matches.
func (v *wsViewer) waitFor(what string, match func(map[string]any) bool) map[string]any {
	v.t.Helper()
	deadline := time.After(patience)
	for {
		v.mu.Lock()
		for _, f := range v.frames {
			if match(f) {
				v.mu.Unlock()
				return f
			}
		}
		v.mu.Unlock()
		select {
		case <-v.notify:
		case <-deadline:
			v.mu.Lock()
			defer v.mu.Unlock()
			v.t.Fatalf("no %s; frames: %v", what, v.frames)
		}
	}
}

// waitOutput waits until the session's output matches re.
func (v *wsViewer) waitOutput(id string, re *regexp.Regexp) {
	v.t.Helper()
	deadline := time.After(patience)
	for {
		v.mu.Lock()
		ok := re.Match(v.out[id])
		v.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-v.notify:
		case <-deadline:
			v.mu.Lock()
			defer v.mu.Unlock()
			v.t.Fatalf("session output never matched %v:\n%q", re, v.out[id])
		}
	}
}

func (v *wsViewer) output(id string) []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]byte(nil), v.out[id]...)
}

// inForeground reports whether a process with this command line (NULs
// between its words) leads the foreground process group of its terminal.
func inForeground(cmdline string) bool {
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		if b, err := os.ReadFile(f); err != nil || string(b) != cmdline {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(f), "stat"))
		if err != nil {
			continue
		}
		// After the command's name in parentheses: state, ppid, pgrp,
		// session, tty, tpgid.
		i := bytes.LastIndexByte(stat, ')')
		if fields := strings.Fields(string(stat[i+1:])); i > 0 && len(fields) > 5 && fields[2] == fields[5] {
			return true
		}
	}
	return false
}

// privateTmux gives the agents a tmux server of their own with a plain sh:
// independent of a shared tmux server and of the machine's shell profile
// (here ~/.bashrc can stall for a minute on a stale pyenv lock).
func privateTmux(t *testing.T) []string {
	dir, err := os.MkdirTemp("", "tmux-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kill := exec.Command("tmux", "kill-server")
		kill.Env = append(os.Environ(), "TMUX_TMPDIR="+dir)
		_ = kill.Run()
		os.RemoveAll(dir)
	})
	return []string{"TMUX_TMPDIR=" + dir, "SHELL=/bin/sh"}
}

func TestTerminalOverWebSocket(t *testing.T) {
	s := startServer(t, 1, "", privateTmux(t)...)
	if v := dialWS(t, s, "wrong"); v.ws != nil || v.frames[0]["status"] != 401 {
		t.Fatalf("wrong token: %v", v.frames)
	}
	a := dialWS(t, s, s.Token)
	a.send(map[string]any{"type": "hello", "id": "1"})
	a.waitFor("hello", func(f map[string]any) bool { return f["type"] == "hello" && f["id"] == "1" })
	a.send(map[string]any{"type": "start_shell", "id": "2", "agent_id": "host-01", "cols": 100, "rows": 30})
	started := a.waitFor("session_started", func(f map[string]any) bool { return f["type"] == "session_started" })
	id := started["session_id"].(string)
	a.waitFor("controller role", func(f map[string]any) bool { return f["type"] == "role_changed" && f["role"] == "controller" })
	t.Cleanup(func() {
		if v := dialWS(t, s, s.Token); v.ws != nil {
			_ = v.ws.WriteJSON(map[string]any{"type": "kill_session", "session_id": id})
		}
	})

	// Type and see the answer. Keys typed before tmux set up its terminal
	// are discarded (as on any terminal), so type until the shell answers.
	answer := regexp.MustCompile(`\b42\b`)
	for deadline := time.Now().Add(patience); !answer.Match(a.output(id)); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("the shell never answered:\n%q", a.output(id))
		}
		a.send(map[string]any{"type": "input", "session_id": id, "data": "echo $((6*7))\r"})
	}

	// Resize, and the shell sees it.
	// tmux applies a resize asynchronously and keeps one row for its status
	// line: ask until the new size shows.
	a.send(map[string]any{"type": "resize", "session_id": id, "cols": 132, "rows": 43})
	sized := regexp.MustCompile(`4[23] 132`)
	for deadline := time.Now().Add(patience); !sized.Match(a.output(id)); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("the shell never saw the new size:\n%q", a.output(id))
		}
		a.send(map[string]any{"type": "input", "session_id": id, "data": "stty size\r"})
	}

	// Ctrl-C interrupts a sleep: typed once the sleep holds the terminal
	// (before, it would reach the shell), it ends the sleep by SIGINT, and
	// the shell runs the next command, which it would not do for 50 minutes
	// otherwise.
	a.send(map[string]any{"type": "input", "session_id": id, "data": "sleep 3017\r"})
	eventually(t, patience, "the sleep in the terminal's foreground", func() bool { return inForeground("sleep\x003017\x00") })
	a.send(map[string]any{"type": "input", "session_id": id, "data": "\x03"})
	a.send(map[string]any{"type": "input", "session_id": id, "data": "echo after-$?\r"})
	a.waitOutput(id, regexp.MustCompile(`after-130`))

	// A second viewer, an observer, replays from 0 and sees the same bytes; its input is refused.
	b := dialWS(t, s, s.Token)
	b.send(map[string]any{"type": "join_session", "session_id": id, "role": "controller", "replay_from": 0})
	// It is told the terminal's size (the controller's last resize), and
	// each resize after: it draws what the programs draw for that size.
	b.waitFor("observer role with the terminal's size", func(f map[string]any) bool {
		return f["type"] == "role_changed" && f["role"] == "observer" && f["cols"] == 132.0 && f["rows"] == 43.0
	})
	a.send(map[string]any{"type": "resize", "session_id": id, "cols": 120, "rows": 40})
	b.waitFor("resized", func(f map[string]any) bool {
		return f["type"] == "resized" && f["session_id"] == id && f["cols"] == 120.0 && f["rows"] == 40.0
	})
	b.send(map[string]any{"type": "resize", "id": "8", "session_id": id, "cols": 20, "rows": 5})
	b.waitFor("an observer's resize refused", func(f map[string]any) bool {
		return f["type"] == "error" && f["code"] == "not_controller" && f["id"] == "8"
	})
	b.send(map[string]any{"type": "input", "id": "9", "session_id": id, "data": "echo sneaky\r"})
	b.waitFor("input refused", func(f map[string]any) bool {
		return f["type"] == "error" && f["code"] == "not_controller" && f["id"] == "9"
	})
	a.send(map[string]any{"type": "input", "session_id": id, "data": "echo shared-$((3*3))\r"})
	a.waitOutput(id, regexp.MustCompile(`shared-9`))
	b.waitOutput(id, regexp.MustCompile(`shared-9`))
	time.Sleep(300 * time.Millisecond)
	ao, bo := a.output(id), b.output(id)
	n := min(len(ao), len(bo))
	if n == 0 || string(ao[:n]) != string(bo[:n]) {
		t.Fatalf("viewers disagree:\n%q\n%q", ao, bo)
	}
	if strings.Contains(string(bo), "sneaky") {
		t.Fatal("an observer's input reached the terminal")
	}

	// The controller drops, output goes on, a new connection replays from
	// where it left: everything in between exactly once.
	seen := uint64(len(a.output(id)))
	a.ws.Close()
	c := dialWS(t, s, s.Token)
	c.mu.Lock()
	c.next[id] = seen // its first byte must be the one after what a saw
	c.mu.Unlock()
	c.send(map[string]any{"type": "join_session", "session_id": id, "role": "controller", "replay_from": seen})
	c.waitFor("controller again", func(f map[string]any) bool { return f["type"] == "role_changed" && f["role"] == "controller" })
	c.send(map[string]any{"type": "input", "session_id": id, "data": "echo back-$((5+5))\r"})
	c.waitOutput(id, regexp.MustCompile(`back-10`))
	b.waitOutput(id, regexp.MustCompile(`back-10`))
	time.Sleep(300 * time.Millisecond)
	full := b.output(id)
	if got := c.output(id); string(full[seen:seen+uint64(min(len(got), len(full)-int(seen)))]) != string(got[:min(len(got), len(full)-int(seen))]) {
		t.Fatalf("replay from %d differs from what the observer saw", seen)
	}
	for _, v := range []*wsViewer{b, c} {
		v.mu.Lock()
		if v.dups != 0 {
			t.Errorf("a viewer saw %d gaps or duplicates", v.dups)
		}
		v.mu.Unlock()
	}

	// Bad frames get error frames and the connection lives on.
	c.send(map[string]any{"type": "teleport", "id": "x"})
	c.waitFor("unknown type error", func(f map[string]any) bool { return f["type"] == "error" && f["code"] == "unknown_type" })
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	c.waitFor("invalid json error", func(f map[string]any) bool { return f["type"] == "error" && f["code"] == "invalid_json" })
	c.send(map[string]any{"type": "ping", "id": "p"})
	c.waitFor("pong", func(f map[string]any) bool { return f["type"] == "pong" && f["id"] == "p" })

	// Killing the session ends it for every viewer.
	c.send(map[string]any{"type": "kill_session", "session_id": id})
	b.waitFor("session_exited", func(f map[string]any) bool { return f["type"] == "session_exited" && f["session_id"] == id })
	_ = context.Background
}
