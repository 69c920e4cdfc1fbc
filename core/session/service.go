// Service is the session use case: it starts interactive, headless
// and background sessions on agents, writes their output into the
// offset-addressed session log (whether or not anyone watches), and checks
// every viewer's right to type before it reaches the process.

package session

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/claudefeed"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Config is what the service needs.
type Config struct {
	Link   ports.AgentLink
	Agents ports.AgentDirectory
	Log    ports.SessionLog
	Clock  ports.Clock
	IDs    ports.IDGenerator
	Logger *slog.Logger
	// Retention is how long an ended session, and its log, is kept
	// (default 24h): ended sessions must not pile up without end.
	Retention time.Duration
	// Changes hears when a session starts, ends, is forgotten or its
	// viewers change.
	Changes ports.ChangeNotifier
}

// Service runs sessions.
type Service struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	reg  *Registry
	cmds map[string]ports.Command
	// feeds parse the output of headless sessions (claude stream-json).
	feeds map[string]*feed
	// exited is closed when a session ends, for viewers waiting on it.
	exited map[string]chan struct{}
	// sizes are the terminal sizes set since this server started (a
	// session adopted after a restart has none until its next resize).
	sizes map[string]Size
}

// Size is a session's terminal size.
type Size struct{ Cols, Rows uint16 }

// changed tells watchers; deferred first, so it runs after the unlock.
func (s *Service) changed() { s.cfg.Changes.Changed(ports.ChangeSessions) }

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Retention <= 0 {
		cfg.Retention = 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Changes == nil {
		cfg.Changes = ports.NoChanges{}
	}
	return &Service{
		cfg: cfg, log: cfg.Logger.With("component", "sessions"),
		reg: NewRegistry(cfg.IDs), cmds: map[string]ports.Command{}, exited: map[string]chan struct{}{},
		feeds: map[string]*feed{}, sizes: map[string]Size{},
	}
}

// Create starts a session on its agent, in a PTY of cols×rows.
func (s *Service) Create(ctx context.Context, spec Spec, cols, rows uint16) (Session, error) {
	defer s.changed()
	if spec.Type == "" {
		spec.Type = ports.SessionBackground
	}
	if spec.Type == ports.SessionInteractive {
		spec.PTY = true
	}
	// An unknown agent gets nothing stored: its id is the caller's words.
	if _, ok := s.cfg.Agents.Agent(spec.AgentID); !ok {
		return Session{}, fmt.Errorf("%w: %q", ports.ErrAgentNotFound, clipID(spec.AgentID))
	}
	s.mu.Lock()
	sess, err := s.reg.Create(spec, s.cfg.Clock.Now())
	var fd *feed
	if err == nil {
		s.exited[sess.ID] = make(chan struct{})
		if sess.Type == ports.SessionHeadless {
			fd = &feed{parser: claudefeed.NewParser()}
			s.feeds[sess.ID] = fd
		}
	}
	s.mu.Unlock()
	if err != nil {
		return Session{}, err
	}
	if cols == 0 || rows == 0 {
		cols, rows = 80, 24
	}
	if sess.PTY {
		s.mu.Lock()
		s.sizes[sess.ID] = Size{cols, rows}
		s.mu.Unlock()
	}
	cmd, err := s.cfg.Link.Start(ctx, spec.AgentID, ports.CommandSpec{
		Command: sess.Command, Args: sess.Args, WorkingDir: sess.Cwd, Env: sess.Env,
		PTY: sess.PTY, Cols: cols, Rows: rows, SessionID: sess.ID, SessionName: AgentName(sess.Name),
		SessionType: sess.Type,
		// Without a terminal, a background session's stdin is a pipe.
		StdinOpen: !sess.PTY && sess.Type == ports.SessionBackground,
		// Terminals and background processes outlive the agent process in
		// tmux where the agent has it; a headless run is tied to its agent.
		Persist: sess.PTY && sess.Type != ports.SessionHeadless,
	}, s.startOptions(sess.ID, sess.ID, fd))
	if err != nil {
		// Nothing ran: the session is not kept, not even as lost.
		s.mu.Lock()
		_, _ = s.reg.Lost(sess.ID, "could not start: "+err.Error(), s.cfg.Clock.Now())
		s.closeExitedLocked(sess.ID)
		_ = s.reg.Forget(sess.ID)
		delete(s.feeds, sess.ID)
		delete(s.sizes, sess.ID)
		s.mu.Unlock()
		return Session{}, err
	}
	s.mu.Lock()
	s.cmds[sess.ID] = cmd
	s.mu.Unlock()
	go s.watch(sess.ID, cmd)
	return sess, nil
}

// startOptions routes a session's command output into its log (and its
// activity feed) whether or not anyone watches.
func (s *Service) startOptions(sessionID, commandID string, fd *feed) ports.StartOptions {
	// An episode of output that cannot be stored (a full disk) is logged
	// once when it begins and once when storing resumes, not per chunk:
	// the log marks each lost byte as a gap and counts it.
	var epMu sync.Mutex // OnOutput is called in order; this only guards a reconnect's overlap
	var failing bool
	var lostFrom uint64
	return ports.StartOptions{
		Detached:  true, // sessions outlive the viewer that started them
		CommandID: commandID,
		OnOutput: func(c ports.OutputChunk) {
			hoptrace.Mark("mgmt.link_output")
			epMu.Lock()
			var off uint64
			var err error
			if ol, ok := s.cfg.Log.(ports.SessionOutputLog); ok {
				// With the command's offsets, so that a restarted server
				// knows what it has (attachLocked) and a gap is marked.
				off, err = ol.AppendOutput(sessionID, ports.OutputSource{CommandID: commandID, Stream: c.Stream, Offset: c.Offset}, c.Lost, c.Data)
			} else {
				off, err = s.cfg.Log.Append(sessionID, c.Data)
			}
			if c.Lost > 0 {
				s.log.Warn("session output lost on its way from the agent; marked as a gap", "session_id", sessionID,
					"command_id", commandID, "lost_bytes", c.Lost)
			}
			switch {
			case err != nil && !failing:
				failing, lostFrom = true, off
				s.log.Error("session output cannot be stored; what is lost is marked as a gap and counted, and storing is retried with every chunk",
					"session_id", sessionID, "offset", off, "err", err)
			case err == nil && failing && len(c.Data) > 0:
				failing = false
				s.log.Info("session output stored again", "session_id", sessionID,
					"gap_from", lostFrom, "gap_to", off, "session_lost_bytes", s.cfg.Log.Lost(sessionID))
			}
			epMu.Unlock()
			hoptrace.Mark("mgmt.stored")
			if fd != nil && fd.write(c.Data) {
				s.changed() // a headless session's transcript grew
			}
		},
		OnStarted: func() {
			s.mu.Lock()
			_, _ = s.reg.Started(sessionID, s.cfg.Clock.Now())
			s.mu.Unlock()
		},
	}
}

func (s *Service) watch(id string, cmd ports.Command) {
	defer s.changed()
	<-cmd.Done()
	r := cmd.Result()
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmds[id] != cmd {
		return // superseded: the session moved to a new command (an adopting agent)
	}
	switch {
	case r.Error != "" && r.ExitCode < 0:
		_, _ = s.reg.Lost(id, r.Error, now)
	case r.Signal != 0:
		_, _ = s.reg.Killed(id, r.ExitCode, now)
	default:
		_, _ = s.reg.Exited(id, r.ExitCode, now)
	}
	if fd := s.feeds[id]; fd != nil {
		fd.flush()
	}
	s.closeExitedLocked(id)
}

// closeExitedLocked tells the session's waiters it ended (once) and lets
// its log close its files, which an ended session must not hold; s.mu held.
func (s *Service) closeExitedLocked(id string) {
	ch := s.exited[id]
	if ch == nil {
		return
	}
	select {
	case <-ch:
	default:
		close(ch)
		if err := s.cfg.Log.Release(id); err != nil {
			s.log.Warn("session log not released", "session_id", id, "err", err)
		}
	}
}

// ReconcileSessions applies an agent's session report (the rule is
// core/session.Reconcile's): sessions it still runs go on, on the command
// that streams them now; sessions the server expected but the agent lost
// are marked lost; ours that the server does not know (after a restart of
// agentic-mgmt) are adopted under their reported id, so their log on disk
// continues; the rest are killed on the agent.
func (s *Service) ReconcileSessions(agentID string, reported []ports.ReportedSession) {
	defer s.changed()
	byName := map[string]ports.ReportedSession{}
	reps := make([]Reported, 0, len(reported))
	for _, r := range reported {
		byName[r.AgentName] = r
		reps = append(reps, Reported{ID: r.SessionID, AgentName: r.AgentName, Type: ports.SessionType(r.Type),
			StartedAt: r.StartedAt, PTY: true})
	}
	var kill []ports.ReportedSession
	s.mu.Lock()
	for _, d := range s.reg.Reconcile(agentID, reps, s.cfg.Clock.Now()) {
		rep := byName[d.AgentName]
		switch d.Action {
		case Keep:
			if cur := s.cmds[d.SessionID]; cur == nil || cur.ID() != rep.CommandID {
				s.attachLocked(agentID, d.SessionID, rep.CommandID)
			}
		case Adopt:
			s.exited[d.SessionID] = make(chan struct{})
			if sess, _ := s.reg.Get(d.SessionID); sess.Type == ports.SessionHeadless {
				s.feeds[d.SessionID] = &feed{parser: claudefeed.NewParser()}
			}
			s.attachLocked(agentID, d.SessionID, rep.CommandID)
			s.log.Info("adopted a session from the agent's report", "agent_id", agentID, "session_id", d.SessionID, "name", d.AgentName)
		case MarkLost:
			delete(s.cmds, d.SessionID)
			s.closeExitedLocked(d.SessionID)
			s.log.Warn("session lost: its agent no longer runs it", "agent_id", agentID, "session_id", d.SessionID)
		case Kill:
			s.log.Warn("killing a session on the agent", "agent_id", agentID, "name", d.AgentName, "reason", d.Reason)
			kill = append(kill, rep)
		}
	}
	s.mu.Unlock()
	for _, rep := range kill {
		if rep.CommandID == "" {
			continue
		}
		cmd := s.cfg.Link.Attach(agentID, rep.CommandID, ports.StartOptions{})
		// Not from the link's receive loop, which calls us.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cmd.Kill(ctx); err != nil {
				s.log.Warn("could not kill a session on the agent", "agent_id", agentID, "command_id", rep.CommandID, "err", err)
			}
		}()
	}
}

// attachLocked binds a session to the command that streams it now; s.mu held.
func (s *Service) attachLocked(agentID, id, commandID string) {
	opts := s.startOptions(id, commandID, s.feeds[id])
	if ol, ok := s.cfg.Log.(ports.SessionOutputLog); ok {
		// What the log holds of this command already (a restarted server's):
		// the agent sends again what it was not told is stored.
		if cur, ok := ol.OutputCursor(id); ok && cur.CommandID == commandID {
			opts.Resume = cur.Next
		}
	}
	cmd := s.cfg.Link.Attach(agentID, commandID, opts)
	s.cmds[id] = cmd
	go s.watch(id, cmd)
}

// StartShell opens the agent's default interactive shell: a tmux session
// (so a dropped viewer loses nothing) where the agent has tmux, else sh.
func (s *Service) StartShell(ctx context.Context, agentID, name string, cols, rows uint16) (Session, error) {
	if _, ok := s.cfg.Agents.Agent(agentID); !ok {
		return Session{}, ports.ErrAgentNotFound
	}
	if name == "" {
		// The random end of an id: a UUIDv7 starts with its timestamp,
		// which two shells started together share.
		id := strings.ReplaceAll(s.cfg.IDs.NewID(), "-", "")
		name = "shell-" + id[max(0, len(id)-12):]
	}
	// No command: the agent's own shell, kept in tmux where the agent has it.
	spec := Spec{AgentID: agentID, Type: ports.SessionInteractive, Name: name,
		Env: map[string]string{"TERM": "xterm-256color"}}
	return s.Create(ctx, spec, cols, rows)
}

// Get returns a session.
func (s *Service) Get(id string) (Session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.Get(id)
}

// List returns the sessions of an agent ("" for all).
func (s *Service) List(agentID string) []Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.List(agentID)
}

// Exited is closed when the session ends.
func (s *Service) Exited(id string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited[id]
}

// Join adds a viewer and returns the role granted.
func (s *Service) Join(id, viewerID string, want Role) (Role, error) {
	defer s.changed()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.Join(id, viewerID, want)
}

// Viewers lists who watches a session now and in which role.
func (s *Service) Viewers(id string) []Viewer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.Viewers(id)
}

// TakeControl makes viewerID the controller of a live session, demoting
// the one who held it (returned, to be told).
func (s *Service) TakeControl(id, viewerID string) (Role, string, error) {
	defer s.changed()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.TakeControl(id, viewerID)
}

// Leave removes a viewer.
func (s *Service) Leave(id, viewerID string) {
	defer s.changed()
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.reg.Leave(id, viewerID)
}

// command returns the session's command if viewerID may control it.
func (s *Service) command(id, viewerID string, input bool) (ports.Command, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.reg.Get(id); !ok {
		return nil, ErrNotFound
	}
	allowed := s.reg.CanResize(id, viewerID)
	if input {
		allowed = s.reg.CanInput(id, viewerID)
	}
	if !allowed {
		return nil, ErrNotController
	}
	cmd, ok := s.cmds[id]
	if !ok {
		return nil, fmt.Errorf("%w: no process", ports.ErrCommandEnded)
	}
	return cmd, nil
}

// Input writes to the session's terminal if viewerID controls it.
func (s *Service) Input(ctx context.Context, id, viewerID string, data []byte) error {
	cmd, err := s.command(id, viewerID, true)
	if err != nil {
		return err
	}
	return cmd.WriteStdin(ctx, data, false)
}

// Resize changes the terminal size if viewerID controls the session.
func (s *Service) Resize(ctx context.Context, id, viewerID string, cols, rows uint16) error {
	cmd, err := s.command(id, viewerID, false)
	if err != nil {
		return err
	}
	if err := cmd.Resize(ctx, cols, rows); err != nil {
		return err
	}
	s.mu.Lock()
	s.sizes[id] = Size{cols, rows}
	s.mu.Unlock()
	return nil
}

// TermSize is the session's terminal size as last set through this
// server; ok is false when it is not known.
func (s *Service) TermSize(id string) (Size, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	z, ok := s.sizes[id]
	return z, ok
}

// Signal signals the session's process group if viewerID controls it.
func (s *Service) Signal(ctx context.Context, id, viewerID string, sig int) error {
	cmd, err := s.command(id, viewerID, true)
	if err != nil {
		return err
	}
	return cmd.Signal(ctx, sig)
}

// Kill ends the session (any viewer may, as any operator may over REST);
// the agent ends a tmux-kept session's tmux session too.
func (s *Service) Kill(ctx context.Context, id string) error {
	defer s.changed()
	s.mu.Lock()
	cmd, ok := s.cmds[id]
	s.mu.Unlock()
	if !ok {
		return ErrNotFound
	}
	return cmd.Kill(ctx)
}

// maxFeedEvents bounds the activity feed kept per headless session; the
// raw output stays complete in the session log.
const maxFeedEvents = 2000

// feed is the typed activity of a headless session.
type feed struct {
	mu      sync.Mutex
	parser  *claudefeed.Parser
	events  []claudefeed.Event
	dropped int
}

func (f *feed) add(evs []claudefeed.Event) {
	f.events = append(f.events, evs...)
	if extra := len(f.events) - maxFeedEvents; extra > 0 {
		f.events = append(f.events[:0], f.events[extra:]...)
		f.dropped += extra
	}
}

// write parses b into the feed and says whether an event came of it.
func (f *feed) write(b []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	evs := f.parser.Write(b)
	f.add(evs)
	return len(evs) > 0
}

func (f *feed) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.add(f.parser.Flush())
}

// Activity returns the typed activity feed of a headless session (events
// with Seq > after), its summary, and how many older events were dropped.
// ok is false for a session that is not headless.
func (s *Service) Activity(id string, after int) (events []claudefeed.Event, summary claudefeed.Summary, dropped int, ok bool) {
	s.mu.Lock()
	f := s.feeds[id]
	s.mu.Unlock()
	if f == nil {
		return nil, claudefeed.Summary{}, 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.events {
		if e.Seq > after {
			events = append(events, e)
		}
	}
	return events, f.parser.Summary(), f.dropped, true
}

// clipID shortens an id for a message: callers may send anything.
func clipID(id string) string {
	if len(id) > 64 {
		return id[:64] + "…"
	}
	return id
}

// Run forgets ended sessions past their retention, with their logs, until
// ctx ends.
func (s *Service) Run(ctx context.Context) {
	// A quarter of the retention, within [1s, 1m]: a session outlives its
	// retention by at most that.
	every := min(max(s.cfg.Retention/4, time.Second), time.Minute)
	clock.Every(ctx, every, func() { s.ForgetEnded(s.cfg.Clock.Now().Add(-s.cfg.Retention)) })
}

// ForgetEnded drops the sessions that ended before cutoff, and their logs,
// and returns how many.
func (s *Service) ForgetEnded(cutoff time.Time) int {
	defer s.changed()
	s.mu.Lock()
	var due []string
	for _, sess := range s.reg.List("") {
		if sess.State.Ended() && !sess.EndedAt.IsZero() && sess.EndedAt.Before(cutoff) {
			due = append(due, sess.ID)
		}
	}
	s.mu.Unlock()
	// The logs go first, so that a session that answers "not found" has
	// left no log behind (an ended session's log is only read, never
	// written, so nothing recreates it).
	for _, id := range due {
		if err := s.cfg.Log.Delete(id); err != nil {
			s.log.Warn("ended session's log not deleted", "session_id", id, "err", err)
		}
	}
	s.mu.Lock()
	var gone []string
	for _, id := range due {
		if s.reg.Forget(id) == nil {
			gone = append(gone, id)
			delete(s.feeds, id)
			delete(s.sizes, id)
			delete(s.exited, id)
			delete(s.cmds, id)
		}
	}
	s.mu.Unlock()
	if len(gone) > 0 {
		s.log.Info("ended sessions forgotten after their retention", "count", len(gone), "retention", s.cfg.Retention)
	}
	return len(gone)
}
