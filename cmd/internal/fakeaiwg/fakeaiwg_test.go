package fakeaiwg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
)

func post(t *testing.T, url string, body any) (*http.Response, map[string]string) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp, out
}

func TestFakeServer(t *testing.T) {
	s, err := fakeaiwg.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Fatalf("URL %s", s.URL())
	}
	ws := "ws" + strings.TrimPrefix(s.URL(), "http")

	s.SetExecutorRegisterStatus(http.StatusNotFound)
	if resp, _ := post(t, s.URL()+"/api/v1/executors/register", map[string]any{"executor_id": "ex1"}); resp.StatusCode != 404 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	s.SetExecutorRegisterStatus(0)
	_, reg := post(t, s.URL()+"/api/v1/executors/register", map[string]any{"executor_id": "ex1"})
	if reg["executor_id"] != "ex1" || reg["token"] == "" || reg["token"] != s.ExecutorToken() {
		t.Fatalf("registration answer %v", reg)
	}
	if n := len(s.ExecutorRegistrations()); n != 2 {
		t.Fatalf("%d registrations recorded", n)
	}
	_, sbx := post(t, s.URL()+"/api/sandboxes/register", map[string]any{"instance_id": "i1"})
	if sbx["sandbox_id"] != "sbx-i1" || sbx["token"] == "" || len(s.Tokens()) != 2 {
		t.Fatalf("sandbox answer %v", sbx)
	}

	// Wrong tokens are refused on both streams.
	for _, u := range []string{ws + "/ws/executors/ex1?token=nope", ws + "/ws/sandbox/sbx-i1?token=nope", ws + "/ws/executors/other?token=" + reg["token"]} {
		_, resp, err := websocket.DefaultDialer.Dial(u, nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %v", u, err)
		}
	}

	sc, _, err := websocket.DefaultDialer.Dial(ws+"/ws/sandbox/sbx-i1?token="+sbx["token"], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	deadline := time.Now().Add(waitLong)
	for !s.SandboxStreamConnected() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !s.SandboxStreamConnected() {
		t.Fatal("sandbox stream not seen")
	}

	c, _, err := websocket.DefaultDialer.Dial(ws+"/ws/executors/ex1?token="+reg["token"], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pong := make(chan string, 1)
	c.SetPongHandler(func(p string) error { pong <- p; return nil })
	inbound := make(chan []byte, 4)
	readErr := make(chan error, 1)
	go func() {
		for {
			_, b, err := c.ReadMessage()
			if err != nil {
				readErr <- err
				return
			}
			inbound <- b
		}
	}()

	_ = c.WriteMessage(websocket.TextMessage, []byte(`{"event":"executor.resync","executor_id":"ex1","ts":"t","data":{"owned_mission_ids":[]}}`))
	_ = c.WriteMessage(websocket.TextMessage, []byte(`not json`))
	_ = c.WriteControl(websocket.PingMessage, []byte("p1"), time.Now().Add(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = c.WriteMessage(websocket.TextMessage, []byte(`{"event":"mission.started","mission_id":"m1","data":{"state":"running"}}`))
	}()
	f, err := s.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.Event == "mission.started" })
	if err != nil {
		t.Fatal(err)
	}
	if f.Conn != 1 || !f.HasMissionID || f.MissionID != "m1" || f.Data["state"] != "running" {
		t.Errorf("frame %+v", f)
	}
	fs := s.Frames()
	if len(fs) != 3 || fs[0].Event != "executor.resync" || fs[0].HasMissionID || fs[0].ExecutorID != "ex1" || fs[1].Event != "" || string(fs[1].Raw) != "not json" {
		t.Errorf("frames %+v", fs)
	}
	select {
	case p := <-pong:
		if p != "p1" {
			t.Errorf("pong %q", p)
		}
	case <-ctx.Done():
		t.Fatal("ping not answered")
	}

	if err := s.SendToExecutor(map[string]any{"event": "mission.hitl_responded"}); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-inbound:
		if !strings.Contains(string(b), "mission.hitl_responded") {
			t.Errorf("inbound %s", b)
		}
	case <-ctx.Done():
		t.Fatal("nothing sent to the executor")
	}
	if s.ExecutorConnections() != 1 {
		t.Errorf("%d connections", s.ExecutorConnections())
	}

	s.DropExecutorStream()
	select {
	case err := <-readErr:
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
			t.Errorf("drop ended the stream with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("drop not seen by the client")
	}
	if err := s.SendToExecutor(map[string]any{}); err == nil {
		t.Error("sent with no stream")
	}
}
