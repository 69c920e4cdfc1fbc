package session

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// fullLog is a session log whose disk can be full: Append then stores
// nothing and says so, as the filestore does.
type fullLog struct {
	*portsfake.SessionLog
	mu   sync.Mutex
	full bool
	lost uint64
}

func (l *fullLog) setFull(v bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.full = v
}

func (l *fullLog) Append(id string, data []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.full {
		l.lost += uint64(len(data))
		return l.End(id), fmt.Errorf("%w: no space left on device", ports.ErrOutputNotStored)
	}
	return l.SessionLog.Append(id, data)
}

func (l *fullLog) Lost(string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// Output that cannot be stored: one log line when the episode begins, one
// when storing resumes (with the bytes lost), none per chunk; the output
// after it is stored.
func TestOutputNotStoredIsLoggedOncePerEpisode(t *testing.T) {
	agents := portsfake.NewDirectory(ports.AgentInfo{ID: "agent-1"})
	link := portsfake.NewLink(portsfake.WithDirectory(agents))
	log := &fullLog{SessionLog: portsfake.NewSessionLog(0)}
	var logs testkit.Buffer
	svc := New(Config{Link: link, Agents: agents, Log: log, Clock: clock.Wall{}, IDs: &ids{},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s, err := svc.Create(context.Background(), Spec{AgentID: "agent-1", Name: "dev", Type: ports.SessionBackground, Command: "yes", PTY: true}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := link.Command(s.ID).Opts.OnOutput
	out(ports.OutputChunk{Data: []byte("before ")})
	for episode := range 2 {
		log.setFull(true)
		for range 100 {
			out(ports.OutputChunk{Data: []byte("0123456789")})
		}
		log.setFull(false)
		out(ports.OutputChunk{Data: []byte(fmt.Sprint("after", episode, " "))})
	}
	if got := logged(log.SessionLog, s.ID); got != "before after0 after1 " {
		t.Fatalf("log holds %q", got)
	}
	text := logs.String()
	if n := strings.Count(text, "session output cannot be stored"); n != 2 {
		t.Errorf("%d lines for 2 episodes of 100 lost chunks each:\n%s", n, text)
	}
	if n := strings.Count(text, "session output stored again"); n != 2 || !strings.Contains(text, "session_lost_bytes=1000") || !strings.Contains(text, "session_lost_bytes=2000") {
		t.Errorf("want 2 resumptions, counting 1000 then 2000 bytes lost:\n%s", text)
	}
}
