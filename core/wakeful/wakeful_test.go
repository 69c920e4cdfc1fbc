package wakeful

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

const patience = 15 * time.Second

var errWake = fmt.Errorf("%w: the saved state is gone", ports.ErrWakeFailed)

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !testkit.Within(patience, cond) {
		t.Fatalf("not within %s: %s", patience, what)
	}
}

func TestConcurrentStartsWakeOnceAndEachHoldsUntilItsCommandEnds(t *testing.T) {
	use := portsfake.NewEnvironmentUse()
	use.Sleep("box")
	unblock := make(chan struct{})
	use.OnWake(func(string) { <-unblock })
	fake := portsfake.NewLink()
	link := Link{AgentLink: fake, Use: use}

	const n = 5
	var wg sync.WaitGroup
	cmds := make([]ports.Command, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmds[i], errs[i] = link.Start(context.Background(), "box", ports.CommandSpec{Command: "true"}, ports.StartOptions{})
		}()
	}
	eventually(t, "every start asks for its environment", func() bool { return len(use.Uses("box")) == n })
	if got := len(fake.Starts()); got != 0 {
		t.Fatalf("%d commands reached the link before the wake ended", got)
	}
	close(unblock)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	if w := use.Wakes("box"); w != 1 {
		t.Fatalf("%d wakes, want 1", w)
	}
	for _, k := range use.Uses("box") {
		if k != ports.UseExec {
			t.Fatalf("uses %v, want exec", use.Uses("box"))
		}
	}
	if h := use.Holds("box"); h != n {
		t.Fatalf("%d holds while the commands run, want %d", h, n)
	}
	for i, c := range cmds {
		c.(*portsfake.Command).Exit(0)
		want := n - i - 1
		eventually(t, fmt.Sprintf("%d holds left after %d commands ended", want, i+1), func() bool { return use.Holds("box") == want })
	}
}

func TestAWakeThatFailsStartsNothingAndHoldsNothing(t *testing.T) {
	use := portsfake.NewEnvironmentUse()
	use.Sleep("box")
	use.FailWakes(errWake)
	fake := portsfake.NewLink()
	link := Link{AgentLink: fake, Use: use}
	_, err := link.Start(context.Background(), "box", ports.CommandSpec{Command: "true"}, ports.StartOptions{})
	if !errors.Is(err, ports.ErrWakeFailed) {
		t.Fatalf("start: %v, want ErrWakeFailed", err)
	}
	if len(fake.Starts()) != 0 || use.Holds("box") != 0 {
		t.Fatalf("after a failed wake: %d starts, %d holds", len(fake.Starts()), use.Holds("box"))
	}
}

func TestAStartTheLinkRefusesHoldsNothingAndKeepsItsError(t *testing.T) {
	use := portsfake.NewEnvironmentUse()
	fake := portsfake.NewLink(portsfake.BeforeStart(func(string, ports.CommandSpec) error { return ports.ErrAgentNotConnected }))
	link := Link{AgentLink: fake, Use: use}
	_, err := link.Start(context.Background(), "box", ports.CommandSpec{Command: "true"}, ports.StartOptions{})
	if !errors.Is(err, ports.ErrAgentNotConnected) {
		t.Fatalf("start: %v", err)
	}
	if h := use.Holds("box"); h != 0 {
		t.Fatalf("%d holds left after a refused start", h)
	}
}

func TestACancelledCallerWaitingForAWakeStartsNothing(t *testing.T) {
	use := portsfake.NewEnvironmentUse()
	use.Sleep("box")
	unblock := make(chan struct{})
	defer close(unblock)
	use.OnWake(func(string) { <-unblock })
	fake := portsfake.NewLink()
	link := Link{AgentLink: fake, Use: use}
	// The first caller wakes it; the second waits and gives up.
	go func() {
		_, _ = link.Start(context.Background(), "box", ports.CommandSpec{Command: "true"}, ports.StartOptions{})
	}()
	eventually(t, "the wake begins", func() bool { return use.Wakes("box") == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := link.Start(ctx, "box", ports.CommandSpec{Command: "true"}, ports.StartOptions{})
		done <- err
	}()
	eventually(t, "the second caller waits", func() bool { return len(use.Uses("box")) == 2 })
	cancel()
	err := testkit.Receive(t, patience, done, "the waiting start")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("start: %v, want the context's error", err)
	}
	if len(fake.Starts()) != 0 {
		t.Fatal("a command reached the link")
	}
}

func TestAKeptSessionTouchesWithItsOutputAndHoldsOnlyWhileStarting(t *testing.T) {
	for _, typ := range []ports.SessionType{ports.SessionInteractive, ports.SessionBackground} {
		t.Run(string(typ), func(t *testing.T) {
			use := portsfake.NewEnvironmentUse()
			use.Sleep("box")
			var heldAtStart int
			fake := portsfake.NewLink(portsfake.BeforeStart(func(string, ports.CommandSpec) error {
				heldAtStart = use.Holds("box")
				return nil
			}))
			link := Link{AgentLink: fake, Use: use}
			var got strings.Builder
			cmd, err := link.Start(context.Background(), "box", ports.CommandSpec{Command: "sh", SessionType: typ},
				ports.StartOptions{OnOutput: func(c ports.OutputChunk) { got.Write(c.Data) }})
			if err != nil {
				t.Fatal(err)
			}
			if use.Wakes("box") != 1 || heldAtStart != 1 {
				t.Fatalf("wakes %d, holds during the start %d", use.Wakes("box"), heldAtStart)
			}
			if h := use.Holds("box"); h != 0 {
				t.Fatalf("a running %s session holds its environment (%d holds)", typ, h)
			}
			c := cmd.(*portsfake.Command)
			c.Stdout("one")
			c.Stdout("two")
			if n := use.Touches("box", ports.UseSession); n != 2 || got.String() != "onetwo" {
				t.Fatalf("touches %d, output %q", n, got.String())
			}
			if k := use.Uses("box"); len(k) != 1 || k[0] != ports.UseSession {
				t.Fatalf("uses %v", k)
			}
		})
	}
}

func TestAHeadlessSessionHoldsUntilItEnds(t *testing.T) {
	use := portsfake.NewEnvironmentUse()
	fake := portsfake.NewLink()
	link := Link{AgentLink: fake, Use: use}
	cmd, err := link.Start(context.Background(), "box", ports.CommandSpec{Command: "claude", SessionType: ports.SessionHeadless}, ports.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := use.Holds("box"); h != 1 {
		t.Fatalf("holds %d, want 1", h)
	}
	cmd.(*portsfake.Command).Exit(0)
	eventually(t, "the hold ends with the run", func() bool { return use.Holds("box") == 0 })
}

func TestHousekeepingNeverWakes(t *testing.T) {
	use := portsfake.NewEnvironmentUse()
	use.Sleep("pool-1")
	link := Link{AgentLink: portsfake.NewLink(), Use: use}
	if _, err := link.Start(context.Background(), "pool-1", ports.CommandSpec{Command: "echo"}, ports.StartOptions{Housekeeping: true}); err != nil {
		t.Fatal(err)
	}
	if len(use.Uses("pool-1")) != 0 {
		t.Fatalf("uses %v", use.Uses("pool-1"))
	}
}

func TestAttachedOutputTouchesOnlyWhenAsked(t *testing.T) {
	use := portsfake.NewEnvironmentUse()
	fake := portsfake.NewLink()
	sessions := Link{AgentLink: fake, Use: use, AttachedOutput: ports.UseSession}
	others := Link{AgentLink: fake, Use: use}
	var n int
	out := func(ports.OutputChunk) { n++ }
	sessions.Attach("box", "c1", ports.StartOptions{OnOutput: out}).(*portsfake.Command).Stdout("x")
	others.Attach("box", "c2", ports.StartOptions{OnOutput: out}).(*portsfake.Command).Stdout("y")
	if n != 2 || use.Touches("box", ports.UseSession) != 1 || len(use.Uses("box")) != 0 {
		t.Fatalf("output %d, touches %d, uses %v", n, use.Touches("box", ports.UseSession), use.Uses("box"))
	}
}

// fakeFiles is an agent's files: one file, "f", holding "data"; heldAt
// records the holds each call saw.
type fakeFiles struct {
	use    *portsfake.EnvironmentUse
	err    error
	heldAt []int
}

func (f *fakeFiles) saw(agentID string) error {
	f.heldAt = append(f.heldAt, f.use.Holds(agentID))
	return f.err
}

func (f *fakeFiles) ListFiles(_ context.Context, agentID, path string) (ports.FileListing, error) {
	return ports.FileListing{Path: path}, f.saw(agentID)
}

func (f *fakeFiles) ReadFile(_ context.Context, agentID, _ string) (ports.FileReader, error) {
	if err := f.saw(agentID); err != nil {
		return nil, err
	}
	return sizedReader{strings.NewReader("data")}, nil
}

func (f *fakeFiles) ReadArchive(ctx context.Context, agentID, dir string) (ports.FileReader, error) {
	return f.ReadFile(ctx, agentID, dir)
}

func (f *fakeFiles) WriteFile(_ context.Context, agentID, _ string, _ fs.FileMode, _ io.Reader) error {
	return f.saw(agentID)
}

func (f *fakeFiles) DeleteFile(_ context.Context, agentID, _ string, _ bool) error {
	return f.saw(agentID)
}

func (f *fakeFiles) WriteArchive(_ context.Context, agentID, _ string, _ io.Reader) error {
	return f.saw(agentID)
}

type sizedReader struct{ *strings.Reader }

func (sizedReader) Close() error  { return nil }
func (r sizedReader) Size() int64 { return r.Reader.Size() }

func TestFileCallsWakeAndHoldUntilTheyEnd(t *testing.T) {
	use := portsfake.NewEnvironmentUse()
	use.Sleep("box")
	inner := &fakeFiles{use: use}
	files := Files{Files: inner, Use: use}
	ctx := context.Background()
	if _, err := files.ListFiles(ctx, "box", "/"); err != nil {
		t.Fatal(err)
	}
	if err := files.WriteFile(ctx, "box", "f", 0o644, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if err := files.DeleteFile(ctx, "box", "f", false); err != nil {
		t.Fatal(err)
	}
	if err := files.WriteArchive(ctx, "box", "/", strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	if use.Wakes("box") != 1 || use.Holds("box") != 0 || fmt.Sprint(inner.heldAt) != "[1 1 1 1]" {
		t.Fatalf("wakes %d, holds after %d, holds during the calls %v", use.Wakes("box"), use.Holds("box"), inner.heldAt)
	}
	for _, read := range []func() (ports.FileReader, error){
		func() (ports.FileReader, error) { return files.ReadFile(ctx, "box", "f") },
		func() (ports.FileReader, error) { return files.ReadArchive(ctx, "box", "/") },
	} {
		r, err := read()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		if err != nil || string(b) != "data" || r.Size() != 4 {
			t.Fatalf("read %q %v, size %d", b, err, r.Size())
		}
		if h := use.Holds("box"); h != 1 {
			t.Fatalf("a reader not closed holds %d, want 1", h)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if h := use.Holds("box"); h != 0 {
			t.Fatalf("a closed reader holds %d", h)
		}
	}
	for _, k := range use.Uses("box") {
		if k != ports.UseFiles {
			t.Fatalf("uses %v", use.Uses("box"))
		}
	}
}

func TestFileCallErrorsPassThroughAndHoldNothing(t *testing.T) {
	use := portsfake.NewEnvironmentUse()
	inner := &fakeFiles{use: use, err: ports.ErrFileNotFound}
	files := Files{Files: inner, Use: use}
	ctx := context.Background()
	_, err := files.ReadFile(ctx, "box", "gone")
	if !errors.Is(err, ports.ErrFileNotFound) {
		t.Fatalf("read: %v", err)
	}
	if err := files.DeleteFile(ctx, "box", "gone", false); !errors.Is(err, ports.ErrFileNotFound) {
		t.Fatalf("delete: %v", err)
	}
	if h := use.Holds("box"); h != 0 {
		t.Fatalf("holds %d after failed calls", h)
	}

	use.Sleep("box")
	use.FailWakes(errWake)
	n := len(inner.heldAt)
	if _, err := files.ListFiles(ctx, "box", "/"); !errors.Is(err, ports.ErrWakeFailed) {
		t.Fatalf("list: %v", err)
	}
	if _, err := files.ReadFile(ctx, "box", "f"); !errors.Is(err, ports.ErrWakeFailed) {
		t.Fatalf("read: %v", err)
	}
	if len(inner.heldAt) != n || use.Holds("box") != 0 {
		t.Fatal("a call reached the agent after a failed wake, or held it")
	}
}

// fakeDialer connects to a loopback echo server of the test's.
type fakeDialer struct {
	ln  net.Listener
	err error
}

func echoServer(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln
}

func (d fakeDialer) DialPort(ctx context.Context, _ string, _ uint16) (ports.Conn, error) {
	if d.err != nil {
		return nil, d.err
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", d.ln.Addr().String())
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

func TestADialWakesAndItsConnectionHoldsUntilClosedAndTouchesWithTraffic(t *testing.T) {
	use := portsfake.NewEnvironmentUse()
	use.Sleep("box")
	d := Dialer{Dialer: fakeDialer{ln: echoServer(t)}, Use: use}
	c, err := d.DialPort(context.Background(), "box", 8080)
	if err != nil {
		t.Fatal(err)
	}
	if use.Wakes("box") != 1 || use.Holds("box") != 1 {
		t.Fatalf("wakes %d, holds %d", use.Wakes("box"), use.Holds("box"))
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q %v", buf, err)
	}
	if n := use.Touches("box", ports.UsePreview); n < 2 {
		t.Fatalf("%d touches for a write and a read", n)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if h := use.Holds("box"); h != 1 {
		t.Fatalf("a half-closed connection holds %d", h)
	}
	_ = c.Close()
	_ = c.Close()
	if h := use.Holds("box"); h != 0 {
		t.Fatalf("a closed connection holds %d", h)
	}

	_, err = Dialer{Dialer: fakeDialer{err: ports.ErrPortNotListening}, Use: use}.DialPort(context.Background(), "box", 1)
	if !errors.Is(err, ports.ErrPortNotListening) || use.Holds("box") != 0 {
		t.Fatalf("dial: %v, holds %d", err, use.Holds("box"))
	}
	use.Sleep("box")
	use.FailWakes(errWake)
	if _, err := d.DialPort(context.Background(), "box", 8080); !errors.Is(err, ports.ErrWakeFailed) || use.Holds("box") != 0 {
		t.Fatalf("dial: %v, holds %d", err, use.Holds("box"))
	}
}

// sessionRig is the session use case on fakes, decorated.
type sessionRig struct {
	use      *portsfake.EnvironmentUse
	link     *portsfake.Link
	agents   *portsfake.Directory
	sessions *Sessions
}

func newSessionRig(t *testing.T) *sessionRig {
	t.Helper()
	r := &sessionRig{use: portsfake.NewEnvironmentUse(), agents: portsfake.NewDirectory(ports.AgentInfo{ID: "box", Status: ports.AgentReady})}
	r.link = portsfake.NewLink(portsfake.WithDirectory(r.agents))
	svc := session.New(session.Config{Link: Link{AgentLink: r.link, Use: r.use, AttachedOutput: ports.UseSession}, Agents: r.agents,
		Log: portsfake.NewSessionLog(1 << 20), Clock: portsfake.NewClock(time.Unix(1e9, 0)), IDs: &counter{}})
	r.sessions = NewSessions(svc, r.use)
	return r
}

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) NewID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return fmt.Sprintf("id-%d", c.n)
}

func TestASessionCreatedInAHibernatedEnvironmentWakesItFirst(t *testing.T) {
	r := newSessionRig(t)
	// Hibernated long enough that the link has forgotten its agent: the
	// wake brings it back.
	r.agents.Remove("box")
	r.use.Sleep("box")
	r.use.OnWake(func(id string) { r.agents.Add(ports.AgentInfo{ID: id, Status: ports.AgentReady}) })
	s, err := r.sessions.StartShell(context.Background(), "box", "", 80, 24)
	if err != nil {
		t.Fatal(err)
	}
	if r.use.Wakes("box") != 1 || r.use.Holds("box") != 0 || s.AgentID != "box" {
		t.Fatalf("wakes %d, holds %d, session %+v", r.use.Wakes("box"), r.use.Holds("box"), s)
	}
	cmd := r.link.Command(r.link.Commands()[0].ID())
	cmd.Stdout("$ ")
	if n := r.use.Touches("box", ports.UseSession); n != 1 {
		t.Fatalf("touches %d", n)
	}

	r.use.Sleep("box")
	r.use.FailWakes(errWake)
	if _, err := r.sessions.Create(context.Background(), session.Spec{AgentID: "box", Command: "sleep"}, 0, 0); !errors.Is(err, ports.ErrWakeFailed) {
		t.Fatalf("create: %v", err)
	}
	if len(r.link.Starts()) != 1 {
		t.Fatal("a session started after a failed wake")
	}
}

func TestAViewerHoldsTheEnvironmentUntilItLeaves(t *testing.T) {
	r := newSessionRig(t)
	s, err := r.sessions.StartShell(context.Background(), "box", "", 80, 24)
	if err != nil {
		t.Fatal(err)
	}
	r.use.Sleep("box") // hibernated by hand meanwhile: the join wakes it
	if _, err := r.sessions.Join(s.ID, "v1", session.Observer); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sessions.Join(s.ID, "v1", session.Observer); err != nil { // a re-join
		t.Fatal(err)
	}
	if _, _, err := r.sessions.TakeControl(s.ID, "v2"); err != nil {
		t.Fatal(err)
	}
	if r.use.Wakes("box") != 1 || r.use.Holds("box") != 2 || r.sessions.Held() != 2 {
		t.Fatalf("wakes %d, holds %d, viewers holding %d", r.use.Wakes("box"), r.use.Holds("box"), r.sessions.Held())
	}
	if k := r.use.Uses("box"); k[len(k)-1] != ports.UseViewer {
		t.Fatalf("uses %v", k)
	}
	r.sessions.Leave(s.ID, "v1")
	if h := r.use.Holds("box"); h != 1 {
		t.Fatalf("holds %d after one viewer left", h)
	}
	r.sessions.Leave(s.ID, "v2")
	r.sessions.Leave(s.ID, "v2")
	if h := r.use.Holds("box"); h != 0 || r.sessions.Held() != 0 {
		t.Fatalf("holds %d after every viewer left", h)
	}

	// A join the use case refuses holds nothing.
	if _, err := r.sessions.Join("nope", "v3", session.Observer); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("join: %v", err)
	}
	if _, err := r.sessions.Join(s.ID, "v3", session.Role("boss")); err == nil {
		t.Fatal("a join as an unknown role was taken")
	}
	if h := r.use.Holds("box"); h != 0 || r.sessions.Held() != 0 {
		t.Fatalf("holds %d after refused joins", h)
	}

	// A failed wake refuses the join.
	r.use.Sleep("box")
	r.use.FailWakes(errWake)
	if _, err := r.sessions.Join(s.ID, "v4", session.Observer); !errors.Is(err, ports.ErrWakeFailed) {
		t.Fatalf("join: %v", err)
	}
	if len(r.sessions.Viewers(s.ID)) != 0 {
		t.Fatalf("viewers %v after a failed wake", r.sessions.Viewers(s.ID))
	}
}

func TestAViewerStopsHoldingWhenItsSessionEnds(t *testing.T) {
	r := newSessionRig(t)
	s, err := r.sessions.Create(context.Background(), session.Spec{AgentID: "box", Command: "make"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.sessions.Join(s.ID, "v1", session.Observer); err != nil {
		t.Fatal(err)
	}
	if h := r.use.Holds("box"); h != 1 {
		t.Fatalf("holds %d", h)
	}
	r.link.Commands()[0].Exit(0)
	eventually(t, "the hold ends with the session", func() bool { return r.use.Holds("box") == 0 && r.sessions.Held() == 0 })
	r.sessions.Leave(s.ID, "v1") // the viewer leaves later: nothing more to release
	if h := r.use.Holds("box"); h != 0 {
		t.Fatalf("holds %d", h)
	}
}
