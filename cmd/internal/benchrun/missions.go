package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/fakeaiwg"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// missionBench measures the executor path: dispatch → mission.started and
// → mission.completed for `true`, sustained missions per second, and the
// resync of 1,000 owned missions.
func missionBench(bins harness.Binaries, n, sustained int, floor stats) error {
	fake, err := fakeaiwg.Start()
	if err != nil {
		return err
	}
	defer fake.Close()
	srv, stop, err := hostServer(bins, "missions", []string{"AIWG_SERVE_ENDPOINT=" + fake.URL()}, nil)
	if err != nil {
		return err
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.Event == "executor.resync" }); err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var seq atomic.Int64
	dispatch := func(objective string) (string, error) {
		id := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), seq.Add(1))
		return id, dispatchMission(ctx, client, srv, fake, map[string]any{"mission_id": id, "objective": objective})
	}
	waitEvent := func(id, event string) error {
		_, err := fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.MissionID == id && f.Event == event })
		return err
	}
	var toStarted, toCompleted []time.Duration
	for i := range n + 20 {
		start := time.Now()
		id, err := dispatch("true")
		if err != nil {
			return err
		}
		if err := waitEvent(id, "mission.started"); err != nil {
			return err
		}
		st := time.Since(start)
		if err := waitEvent(id, "mission.completed"); err != nil {
			return err
		}
		if i >= 20 { // warm-up
			toStarted = append(toStarted, st)
			toCompleted = append(toCompleted, time.Since(start))
		}
	}
	rows := []stats{summarize("dispatch → mission.started (`true`)", toStarted), summarize("dispatch → mission.completed (`true`)", toCompleted)}
	if floor.n > 0 {
		rows = append([]stats{floor}, rows...)
	}
	fmt.Println("\n| mission latency | n | p50 | p99 | mean |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %s | %s | %s |\n", r.name, r.n, ms(r.p50), ms(r.p99), ms(r.avg))
	}

	// Sustained: many dispatchers at once, every mission to completion.
	const workers = 16
	var wg sync.WaitGroup
	ids := make(chan string, sustained)
	start := time.Now()
	var failed atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < sustained; i += workers {
				id, err := dispatch("true")
				if err != nil {
					failed.Add(1)
					continue
				}
				ids <- id
			}
		}()
	}
	wg.Wait()
	close(ids)
	dispatched := time.Since(start)
	for id := range ids {
		if err := waitEvent(id, "mission.completed"); err != nil {
			return err
		}
	}
	total := time.Since(start)
	fmt.Printf("\nsustained: %d missions (16 concurrent dispatchers), all completed in %s: %.0f dispatch→completed missions/s (dispatch alone %.0f/s), %d dispatch errors\n",
		sustained, total.Round(time.Millisecond), float64(sustained)/total.Seconds(), float64(sustained)/dispatched.Seconds(), failed.Load())
	return resyncBench(bins)
}

func summarize(name string, d []time.Duration) stats {
	s := stats{name: name, n: len(d)}
	sorted := append([]time.Duration(nil), d...)
	sortDurations(sorted)
	var sum time.Duration
	for _, x := range sorted {
		sum += x
	}
	s.p50, s.p99, s.avg = sorted[len(sorted)/2], sorted[len(sorted)*99/100], sum/time.Duration(len(sorted))
	return s
}

// resyncBench stores 1,000 suspended missions, starts agentic-mgmt on them
// and times the executor stream from its first frame to the last mission.resumed.
func resyncBench(bins harness.Binaries) error {
	const owned = 1000
	dataDir, err := os.MkdirTemp("", "agentic-bench-resync-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	store, err := filestore.NewMissionStore(filestore.MissionStoreConfig{Dir: dataDir})
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	var ms []ports.Mission
	for i := range owned {
		ms = append(ms, ports.Mission{
			ID: fmt.Sprintf("resync-%04d", i), Objective: "sleep 600", RequestHash: "h", State: ports.MissionSuspended,
			AgentID: "host-01", SessionID: fmt.Sprintf("sess-%04d", i), CheckpointID: fmt.Sprintf("ck-%04d", i),
			CreatedAt: now.Add(time.Duration(i) * time.Millisecond), UpdatedAt: now, EstimatedStart: now,
		})
	}
	if err := store.Put(context.Background(), ms...); err != nil {
		return err
	}
	store.Close()
	if err := os.MkdirAll(filepath.Join(dataDir, "secrets"), 0o700); err != nil {
		return err
	}
	fake, err := fakeaiwg.Start()
	if err != nil {
		return err
	}
	defer fake.Close()
	// No host agents: the missions' sessions are not checked against an agent here.
	srv, err := harness.Start(bins, harness.Options{HostAgents: 0, DataDir: dataDir, Env: []string{"AIWG_SERVE_ENDPOINT=" + fake.URL()}})
	if err != nil {
		return err
	}
	defer srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.Event == "executor.resync" }); err != nil {
		return err
	}
	first := time.Now()
	last := fmt.Sprintf("resync-%04d", owned-1)
	if _, err := fake.WaitFrame(ctx, func(f fakeaiwg.Frame) bool { return f.Event == "mission.resumed" && f.MissionID == last }); err != nil {
		return err
	}
	took := time.Since(first)
	resumed := 0
	for _, f := range fake.Frames() {
		if f.Event == "mission.resumed" {
			resumed++
		}
	}
	fmt.Printf("\nresync of %d owned missions: first frame (executor.resync) to the last mission.resumed: %s (%d resumed; goal < 1 s)\n", owned, took.Round(time.Millisecond), resumed)
	return nil
}

// dispatchMission posts a mission as aiwg serve does; anything but 202 is
// an error.
func dispatchMission(ctx context.Context, client *http.Client, srv *harness.Server, fake *fakeaiwg.Server, mission map[string]any) error {
	body, _ := json.Marshal(mission)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.RESTURL+"/api/v1/sessions/bench/dispatch", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+fake.ExecutorToken())
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("dispatch: status %d", resp.StatusCode)
	}
	return nil
}
