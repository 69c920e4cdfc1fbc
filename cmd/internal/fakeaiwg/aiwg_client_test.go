package fakeaiwg_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/aiwg"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

var tsPattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)

func isResync(f fakeaiwg.Frame) bool { return f.Event == string(ports.EventResync) }

func TestRegistrationPayloads(t *testing.T) {
	r := newRig(t, nil, nil, nil).start()
	r.waitFrame("resync", isResync)
	waitFor(t, "sandbox stream", r.srv.SandboxStreamConnected)

	sbx := r.srv.SandboxRegistrations()[0]
	wantSbx := map[string]any{
		"name": "test", "instance_id": testInstance, "version": "1.2.3",
		"grpc_endpoint": "http://10.0.0.5:8120", "ws_endpoint": "ws://10.0.0.5:8121", "http_endpoint": "http://10.0.0.5:8122",
		"capabilities": []any{"isolation:host", "platform:linux/amd64", "resumable", "hitl"},
	}
	if !reflect.DeepEqual(sbx, wantSbx) {
		t.Errorf("sandbox registration\n got %v\nwant %v", sbx, wantSbx)
	}
	ex := r.srv.ExecutorRegistrations()[0]
	wantEx := map[string]any{
		"executor_id": testInstance, "name": "agentic-sandbox-test", "version": "1.2.3", "spec_version": "1.0.0",
		"transport_endpoints": map[string]any{"rest": "http://10.0.0.5:8122", "ws": "ws://10.0.0.5:8121"},
		"capabilities":        []any{"isolation:host", "platform:linux/amd64", "resumable", "hitl"},
	}
	if !reflect.DeepEqual(ex, wantEx) {
		t.Errorf("executor registration\n got %v\nwant %v", ex, wantEx)
	}

	waitFor(t, "connected status", func() bool { return r.c.Status().Connected })
	st := r.c.Status()
	want := ports.ExecutorStatus{Configured: true, Connected: true, Endpoint: r.srv.URL(),
		SandboxID: "sbx-" + testInstance, ExecutorID: testInstance}
	if st != want {
		t.Errorf("status %+v, want %+v", st, want)
	}
	if !r.c.Registered() || r.c.ExecutorID() != testInstance {
		t.Errorf("Registered %v ExecutorID %q", r.c.Registered(), r.c.ExecutorID())
	}
	tok := r.srv.ExecutorToken()
	if !r.c.VerifyToken(tok) || r.c.VerifyToken(tok+"x") || r.c.VerifyToken("") || r.c.VerifyToken(tok[:len(tok)-1]) {
		t.Error("VerifyToken accepts the wrong tokens or refuses the right one")
	}
}

func TestDefaultNameAndNilCapabilities(t *testing.T) {
	r := newRig(t, nil, nil, func(c *aiwg.Config) { c.Name = ""; c.Capabilities = nil }).start()
	r.waitFrame("resync", isResync)
	ex := r.srv.ExecutorRegistrations()[0]
	if ex["name"] != "agentic-sandbox-agentic-sandbox" {
		t.Errorf("executor name %v", ex["name"])
	}
	if caps, ok := ex["capabilities"].([]any); !ok || len(caps) != 0 {
		t.Errorf("capabilities %#v, want []", ex["capabilities"])
	}
	waitFor(t, "sandbox registration", func() bool { return len(r.srv.SandboxRegistrations()) > 0 })
	if n := r.srv.SandboxRegistrations()[0]["name"]; n != "agentic-sandbox" {
		t.Errorf("sandbox name %v", n)
	}
}

// TestResyncBacklogPairsLive checks the order on connect: resync, backlog,
// pairs, then live events, and that delivered events are acked.
func TestResyncBacklogPairsLive(t *testing.T) {
	out := newOutbox()
	for i := 1; i <= 3; i++ {
		out.add(t, "m-old", "mission.progress", i)
	}
	hub := newHub("m1", "m2")
	// Appended while Resync runs: after the boundary, so after the pairs.
	hub.onResync = func() { out.add(t, "m1", "mission.completed", 4) }
	r := newRig(t, hub, out, nil).start()

	r.waitFrame("event 4", func(f fakeaiwg.Frame) bool { return num(f) == 4 })
	live := out.add(t, "m2", "mission.progress", 5)
	r.waitFrame("live event 5", func(f fakeaiwg.Frame) bool { return num(f) == 5 })

	var got []string
	for _, f := range r.srv.Frames() {
		if f.Conn != 1 {
			t.Fatalf("unexpected reconnect: %s", describe(r.srv.Frames()))
		}
		s := f.Event + ":" + f.MissionID
		if n := num(f); n > 0 {
			s += ":" + string(rune('0'+n))
		}
		got = append(got, s)
	}
	want := []string{
		"executor.resync:",
		"mission.progress:m-old:1", "mission.progress:m-old:2", "mission.progress:m-old:3",
		"mission.reconnected:m1", "mission.resumed:m1", "mission.reconnected:m2", "mission.resumed:m2",
		"mission.completed:m1:4", "mission.progress:m2:5",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("frames\n got %q\nwant %q", got, want)
	}
	first := r.srv.Frames()[0]
	if ids, _ := first.Data["owned_mission_ids"].([]any); len(ids) != 2 || first.Data["protocol_version"] != "1.0.0" {
		t.Errorf("resync data %v", first.Data)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := r.c.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if out.Acked() != live.Seq {
		t.Errorf("acked %d, want %d", out.Acked(), live.Seq)
	}
}

func TestFrameFormat(t *testing.T) {
	out := newOutbox()
	paris := time.FixedZone("CEST", 2*3600)
	_, _ = out.Append(context.Background(),
		ports.Event{Type: "mission.assigned", MissionID: "m1", TS: time.Date(2026, 5, 9, 9, 13, 22, 0, paris)},
		ports.Event{Type: "mission.progress", MissionID: "m1", TS: time.Date(2026, 5, 9, 7, 13, 22, 123_987_654, time.UTC), Data: map[string]any{"iteration": 2}},
		ports.Event{Type: "mission.progress", MissionID: "m1"}, // no ts: the clock's
	)
	r := newRig(t, nil, out, nil).start()
	last := r.waitFrame("third event", func(f fakeaiwg.Frame) bool { return f.Event == "mission.progress" && f.Data["iteration"] == nil })
	fs := r.srv.Frames()

	resync := fs[0]
	if resync.Event != string(ports.EventResync) || resync.HasMissionID || resync.ExecutorID != testInstance || !tsPattern.MatchString(resync.TS) {
		t.Errorf("resync frame %s", resync.Raw)
	}
	if fs[1].TS != "2026-05-09T07:13:22.000Z" || fs[2].TS != "2026-05-09T07:13:22.123Z" || !tsPattern.MatchString(last.TS) {
		t.Errorf("ts %q %q %q", fs[1].TS, fs[2].TS, last.TS)
	}
	for _, f := range fs {
		var m map[string]any
		if err := json.Unmarshal(f.Raw, &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["seq"]; ok {
			t.Errorf("frame carries seq: %s", f.Raw)
		}
		if d, ok := m["data"].(map[string]any); !ok || d == nil {
			t.Errorf("data not an object: %s", f.Raw)
		}
		if f.Event != string(ports.EventResync) && (!f.HasMissionID || f.MissionID != "m1" || f.ExecutorID != testInstance) {
			t.Errorf("envelope: %s", f.Raw)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		if len(m) > 5 {
			t.Errorf("extra keys %v", keys)
		}
	}
	if string(fs[1].Raw) != `{"event":"mission.assigned","executor_id":"`+testInstance+`","mission_id":"m1","ts":"2026-05-09T07:13:22.000Z","data":{}}` {
		t.Errorf("raw frame %s", fs[1].Raw)
	}
}

// checkDelivery asserts that the mission frames numbered 1..n all arrived,
// in order on each connection, and that anything sent twice is a re-send
// of the tail of the previous connection (at-least-once, never a gap).
func checkDelivery(t *testing.T, frames []fakeaiwg.Frame, n int) (dups int) {
	t.Helper()
	seen := map[int]bool{}
	prev, conn := 0, 0
	for _, f := range frames {
		k := num(f)
		if k < 0 {
			continue
		}
		if f.Conn != conn {
			conn = f.Conn
			if k > prev+1 {
				t.Fatalf("gap at reconnect: %d after %d%s", k, prev, describe(frames))
			}
		} else if k != prev+1 {
			t.Fatalf("out of order on conn %d: %d after %d%s", conn, k, prev, describe(frames))
		}
		if seen[k] {
			dups++
		}
		seen[k] = true
		prev = k
	}
	for i := 1; i <= n; i++ {
		if !seen[i] {
			t.Fatalf("event %d lost%s", i, describe(frames))
		}
	}
	return dups
}

func testDropMidStream(t *testing.T, drop func(*fakeaiwg.Server)) {
	out := newOutbox()
	r := newRig(t, newHub("m1"), out, nil).start()
	r.waitFrame("resync", isResync)
	const total = 60
	for i := 1; i <= total; i++ {
		out.add(t, "m1", "mission.progress", i)
		if i == 20 || i == 40 {
			drop(r.srv)
		}
		if i%5 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	r.waitFrame("last event", func(f fakeaiwg.Frame) bool { return num(f) == total })
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := r.c.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	frames := r.srv.Frames()
	dups := checkDelivery(t, frames, total)
	if r.srv.ExecutorConnections() < 2 {
		t.Fatalf("no reconnect")
	}
	// Every connection starts with a resync.
	conn := 0
	for _, f := range frames {
		if f.Conn != conn {
			conn = f.Conn
			if f.Event != string(ports.EventResync) {
				t.Errorf("conn %d starts with %s", conn, f.Event)
			}
		}
	}
	if got := len(r.srv.ExecutorRegistrations()); got < 2 {
		t.Errorf("executor registered %d times, want again after the loss", got)
	}
	t.Logf("%d connections, %d frames re-sent", r.srv.ExecutorConnections(), dups)
}

func TestDropMidStreamNothingLost(t *testing.T) {
	testDropMidStream(t, (*fakeaiwg.Server).DropExecutorStream)
}

// A cut connection (no close frame) loses what was in flight on the wire;
// only pong-confirmed events are acked, so those are sent again.
func TestKilledStreamNothingLost(t *testing.T) {
	testDropMidStream(t, (*fakeaiwg.Server).KillExecutorStream)
}

// TestEventsWhileDown checks that events emitted while aiwg serve is away
// come after the next resync, in order.
func TestEventsWhileDown(t *testing.T) {
	out := newOutbox()
	r := newRig(t, nil, out, nil)
	r.srv.SetExecutorStreamStatus(http.StatusServiceUnavailable)
	r.start()
	waitFor(t, "a refused stream", func() bool { return len(r.srv.ExecutorRegistrations()) >= 2 })
	for i := 1; i <= 5; i++ {
		out.add(t, "m1", "mission.progress", i)
	}
	r.srv.SetExecutorStreamStatus(0)
	r.waitFrame("event 5", func(f fakeaiwg.Frame) bool { return num(f) == 5 })
	if dups := checkDelivery(t, r.srv.Frames(), 5); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	if r.srv.Frames()[0].Event != string(ports.EventResync) {
		t.Error("first frame is not the resync")
	}
}

func TestExecutorRegister404(t *testing.T) {
	r := newRig(t, nil, nil, nil)
	r.srv.SetExecutorRegisterStatus(http.StatusNotFound)
	r.start()
	waitFor(t, "retries", func() bool { return len(r.srv.ExecutorRegistrations()) >= 3 })
	waitFor(t, "sandbox stream", r.srv.SandboxStreamConnected)
	st := r.c.Status()
	if st.ExecutorRegisterError != "executor registration: 404 Not Found" || st.Connected || st.ExecutorID != "" || st.SandboxID == "" {
		t.Errorf("status %+v", st)
	}
	if r.c.Registered() || r.c.VerifyToken("anything") {
		t.Error("registered without a token")
	}
	if !strings.Contains(r.logs.String(), "404 Not Found") {
		t.Error("404 not logged")
	}

	r.srv.SetExecutorRegisterStatus(0)
	r.waitFrame("resync", isResync)
	waitFor(t, "error cleared", func() bool { return r.c.Status().ExecutorRegisterError == "" && r.c.Registered() })
	if len(r.srv.SandboxRegistrations()) != 1 {
		t.Errorf("sandbox side disturbed: %d registrations\n%s", len(r.srv.SandboxRegistrations()), r.logs)
	}
}

func TestSandboxFailureDoesNotStallExecutor(t *testing.T) {
	r := newRig(t, nil, nil, nil)
	r.srv.SetSandboxRegisterStatus(http.StatusServiceUnavailable)
	r.start()
	r.waitFrame("resync", isResync)
	waitFor(t, "sandbox retries", func() bool { return len(r.srv.SandboxRegistrations()) >= 3 })
	if r.c.Status().SandboxID != "" {
		t.Error("sandbox id without registration")
	}
	r.srv.SetSandboxRegisterStatus(0)
	waitFor(t, "sandbox stream", r.srv.SandboxStreamConnected)
}

func TestSandboxStreamReconnects(t *testing.T) {
	r := newRig(t, nil, nil, nil).start()
	waitFor(t, "sandbox stream", r.srv.SandboxStreamConnected)
	r.srv.DropSandboxStream()
	waitFor(t, "re-registration", func() bool { return len(r.srv.SandboxRegistrations()) >= 2 })
	waitFor(t, "sandbox stream again", r.srv.SandboxStreamConnected)
	if r.srv.ExecutorConnections() != 1 {
		t.Errorf("executor stream disturbed: %d connections", r.srv.ExecutorConnections())
	}
}

func TestTokenRejectedRegistersAgain(t *testing.T) {
	r := newRig(t, nil, nil, nil)
	r.srv.SetExecutorStreamStatus(http.StatusUnauthorized)
	r.start()
	waitFor(t, "re-registrations", func() bool { return len(r.srv.ExecutorRegistrations()) >= 3 })
	if !strings.Contains(r.logs.String(), "token rejected") {
		t.Error("rejection not logged")
	}
	r.srv.SetExecutorStreamStatus(0)
	r.waitFrame("resync", isResync)
	if !r.c.VerifyToken(r.srv.ExecutorToken()) {
		t.Error("client does not hold the newest token")
	}
}

func TestReconnectSkipsBackoff(t *testing.T) {
	r := newRig(t, nil, nil, func(c *aiwg.Config) { c.BackoffMin, c.BackoffMax = time.Minute, time.Minute })
	r.srv.SetExecutorRegisterStatus(http.StatusNotFound)
	r.start()
	waitFor(t, "first attempt", func() bool { return len(r.srv.ExecutorRegistrations()) == 1 })
	r.srv.SetExecutorRegisterStatus(0)
	time.Sleep(50 * time.Millisecond)
	if n := len(r.srv.ExecutorRegistrations()); n != 1 {
		t.Fatalf("retried before Reconnect: %d", n)
	}
	r.c.Reconnect()
	r.waitFrame("resync after Reconnect", isResync)

	// Connected: Reconnect drops the stream and connects again now.
	r.c.Reconnect()
	r.waitFrame("second resync", func(f fakeaiwg.Frame) bool { return isResync(f) && f.Conn == 2 })
}

func TestHITLRespondedReachesHub(t *testing.T) {
	hub := newHub()
	r := newRig(t, hub, nil, nil).start()
	r.waitFrame("resync", isResync)
	bad := []string{
		`not json`, `[]`, `{}`, `null`, `{"event":123}`, `{"event":"mission.hitl_responded"}`,
		`{"event":"mission.hitl_responded","data":null}`, `{"event":"mission.hitl_responded","data":"x"}`,
		`{"event":"mission.hitl_responded","data":{"hitl_id":"h0"}}`,
		`{"event":"mission.hitl_responded","data":{"text":"yes"}}`,
		`{"event":"mission.hitl_responded","data":{"hitl_id":"","text":"yes"}}`,
		`{"event":"mission.hitl_responded","data":{"hitl_id":5,"text":"yes"}}`,
		`{"event":"mission.something_else","data":{}}`, "\x00\xff",
	}
	for _, b := range bad {
		if err := r.srv.SendRawToExecutor([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.srv.SendToExecutor(map[string]any{"event": "mission.hitl_responded", "data": map[string]any{"hitl_id": "unknown", "text": "no"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.srv.SendToExecutor(map[string]any{"event": "mission.hitl_responded", "data": map[string]any{"hitl_id": "h1", "text": "yes"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.srv.SendToExecutor(map[string]any{"event": "mission.hitl_responded", "data": map[string]any{"hitl_id": "h2", "text": ""}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "HITL answers", func() bool { return len(hub.hitlCalls()) == 3 })
	want := []hitlCall{{"unknown", "no"}, {"h1", "yes"}, {"h2", ""}}
	if got := hub.hitlCalls(); !reflect.DeepEqual(got, want) {
		t.Errorf("hub got %v, want %v", got, want)
	}
	if n := r.srv.ExecutorConnections(); n != 1 || !r.c.Status().Connected {
		t.Errorf("bad frames broke the stream: %d connections", n)
	}
}

// TestDeadPeerNoticed runs against a peer that accepts the stream but
// never reads, so never answers a ping: the client must give up on it
// after 2.5 ping intervals and connect again.
func TestDeadPeerNoticed(t *testing.T) {
	var conns atomic.Int32
	block := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/sandboxes/register", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("POST /api/v1/executors/register", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"executor_id":"ex","token":"tok-dead-peer"}`))
	})
	up := websocket.Upgrader{}
	mux.HandleFunc("GET /ws/executors/{id}", func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		conns.Add(1)
		<-block
	})
	hs := httptest.NewServer(mux)
	defer hs.Close()
	defer close(block)

	c := aiwg.New(aiwg.Config{Endpoint: hs.URL, InstanceID: "ex", Hub: newHub(), Outbox: newOutbox(),
		BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond, PingInterval: 40 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "a second connection", func() bool { return conns.Load() >= 2 })
}

func TestFlushWaitsForDelivery(t *testing.T) {
	out := newOutbox()
	out.add(t, "m1", "mission.suspended", 1)
	r := newRig(t, nil, out, nil)
	r.srv.SetExecutorRegisterStatus(http.StatusNotFound)
	r.start()

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := r.c.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with no stream: %v", err)
	}

	r.srv.SetExecutorRegisterStatus(0)
	ctx2, cancel2 := context.WithTimeout(context.Background(), waitLong)
	defer cancel2()
	if err := r.c.Flush(ctx2); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if out.Acked() != 1 {
		t.Errorf("acked %d", out.Acked())
	}
	if _, err := r.srv.WaitFrame(ctx2, func(f fakeaiwg.Frame) bool { return f.Event == "mission.suspended" }); err != nil {
		t.Error("flushed but never received")
	}
}

func TestResyncFailureRetries(t *testing.T) {
	hub := newHub()
	hub.fail = errors.New("store down")
	r := newRig(t, hub, nil, nil).start()
	waitFor(t, "several attempts", func() bool { return r.srv.ExecutorConnections() >= 2 })
	if r.c.Status().Connected {
		t.Error("connected without a resync")
	}
	hub.mu.Lock()
	hub.fail = nil
	hub.mu.Unlock()
	r.waitFrame("resync", isResync)
}
