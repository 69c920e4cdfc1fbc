package filestore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

func newTestClock() *portsfake.Clock {
	return portsfake.NewClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
}

func openStore(t *testing.T, cfg MissionStoreConfig) *MissionStore {
	t.Helper()
	s, err := NewMissionStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustPut(t *testing.T, s *MissionStore, ms ...ports.Mission) {
	t.Helper()
	if err := s.Put(context.Background(), ms...); err != nil {
		t.Fatalf("Put: %v", err)
	}
}

// liveIDs returns the ids Load returns, in its order.
func liveIDs(t *testing.T, s *MissionStore) []string {
	t.Helper()
	ms, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

func wantIDs(t *testing.T, s *MissionStore, want ...string) {
	t.Helper()
	if got := liveIDs(t, s); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("live missions %v, want %v", got, want)
	}
}

func wantArchived(t *testing.T, s *MissionStore, want ports.Mission) {
	t.Helper()
	got, ok, err := s.Archived(want.ID)
	if err != nil || !ok || !portstest.EqualMissions(got, want) {
		t.Fatalf("Archived(%s) = %+v, %v, %v; want %+v", want.ID, got, ok, err, want)
	}
}

// fileMissions parses missions.json as a reader would, without the store.
func fileMissions(t *testing.T, dir string) []ports.Mission {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, MissionsFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Version  int             `json:"version"`
		Missions []ports.Mission `json:"missions"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("missions.json does not parse: %v\n%s", err, data)
	}
	if doc.Version != 1 {
		t.Fatalf("version %d", doc.Version)
	}
	return doc.Missions
}

func TestMissionStoreSuite(t *testing.T) {
	portstest.RunMissionStoreSuite(t, func(t *testing.T, dir string) ports.MissionStore {
		return openStore(t, MissionStoreConfig{Dir: dir})
	})
}

func TestMissionStoreSuiteNoRetention(t *testing.T) {
	portstest.RunMissionStoreSuite(t, func(t *testing.T, dir string) ports.MissionStore {
		return openStore(t, MissionStoreConfig{Dir: dir, Retention: -1})
	})
}

func TestMissionStoreFileFormat(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := openStore(t, MissionStoreConfig{Dir: dir, Clock: newTestClock()})
	if m := testkit.Mode(t, dir); m != 0o700 {
		t.Fatalf("data dir mode %v", m)
	}
	t0 := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	mk := func(id string, created time.Time) ports.Mission {
		m := portstest.MinimalMission(id)
		m.CreatedAt = created
		return m
	}
	// Out of order, and two with the same creation time.
	mustPut(t, s, mk("c", t0.Add(2*time.Second)), mk("b", t0))
	mustPut(t, s, mk("a", t0), mk("d", t0.Add(-time.Hour)))
	want := []string{"d", "a", "b", "c"}
	wantIDs(t, s, want...)
	var got []string
	for _, m := range fileMissions(t, dir) {
		got = append(got, m.ID)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("file order %v, want %v", got, want)
	}
	// A change of creation time moves a mission.
	mustPut(t, s, mk("d", t0.Add(time.Hour)))
	wantIDs(t, s, "a", "b", "c", "d")

	p := filepath.Join(dir, MissionsFile)
	if m := testkit.Mode(t, p); m != 0o600 {
		t.Fatalf("missions.json mode %v", m)
	}
	data, _ := os.ReadFile(p)
	if !bytes.HasPrefix(data, []byte(`{"version": 1, "missions": [`)) || bytes.Count(data, []byte("\n")) != 6 {
		t.Fatalf("layout:\n%s", data)
	}
	testkit.OnlyFiles(t, dir, MissionsFile)
	if err := s.Put(context.Background(), ports.Mission{State: ports.MissionRunning}); err == nil {
		t.Fatal("Put of a mission without an id succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := s.Archived("a"); err != nil {
		t.Fatalf("Archived(not archived) after Close: %v", err)
	}
}

// N Puts that arrive while a write is in progress share the next one.
func TestMissionStoreGroupCommit(t *testing.T) {
	s := openStore(t, MissionStoreConfig{Dir: t.TempDir()})
	// Holding the read lock stalls the writer after its first file, at
	// the point where it publishes the result.
	s.mu.RLock()
	locked := true
	t.Cleanup(func() { // before Close, which would wait for the writer
		if locked {
			s.mu.RUnlock()
		}
	})
	first := make(chan error, 1)
	go func() { first <- s.Put(context.Background(), portstest.MinimalMission("first")) }()
	waitFor(t, func() bool { return s.writes.Load() == 1 })

	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := s.Put(context.Background(), portstest.MinimalMission(fmt.Sprintf("m%02d", i))); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, func() bool {
		s.writer.mu.Lock()
		defer s.writer.mu.Unlock()
		return len(s.writer.queue) == n
	})
	locked = false
	s.mu.RUnlock()
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if w := s.writes.Load(); w != 2 {
		t.Fatalf("%d writes for %d Puts, want 2", w, n+1)
	}
	if got := len(liveIDs(t, s)); got != n+1 {
		t.Fatalf("%d missions", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the condition", cond)
}

func terminal(id string, state ports.MissionState, ended time.Time) ports.Mission {
	m := portstest.MinimalMission(id)
	m.State, m.EndedAt, m.UpdatedAt = state, ended, ended
	return m
}

func archiveLines(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, MissionsArchiveFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

func TestMissionStoreRetention(t *testing.T) {
	dir := t.TempDir()
	clock := newTestClock()
	cfg := MissionStoreConfig{Dir: dir, Clock: clock} // default 24h
	s := openStore(t, cfg)
	now := clock.Now()
	recent := terminal("recent", ports.MissionCompleted, now.Add(-time.Hour))
	running := portstest.SampleMission(1) // non-terminal: kept however old
	running.CreatedAt = now.Add(-1000 * time.Hour)
	old := terminal("old", ports.MissionFailed, now.Add(-25*time.Hour))
	noEnd := terminal("no-end", ports.MissionAborted, time.Time{})
	noEnd.UpdatedAt = now.Add(-48 * time.Hour) // no EndedAt: counts from UpdatedAt
	mustPut(t, s, recent, running, old, noEnd)

	// Archived in the same write that stored them.
	wantIDs(t, s, running.ID, "recent")
	wantArchived(t, s, old)
	wantArchived(t, s, noEnd)
	if _, ok, _ := s.Archived("recent"); ok {
		t.Fatal("recent mission archived")
	}
	if got := fileMissions(t, dir); len(got) != 2 {
		t.Fatalf("live file holds %d missions", len(got))
	}
	if n := len(archiveLines(t, dir)); n != 2 {
		t.Fatalf("archive has %d lines", n)
	}

	// Time passes; the next write moves "recent" out too.
	clock.Advance(24 * time.Hour)
	mustPut(t, s, portstest.MinimalMission("new"))
	wantIDs(t, s, running.ID, "new")
	wantArchived(t, s, recent)

	// The index is rebuilt from the file at open.
	s.Close()
	s = openStore(t, cfg)
	wantIDs(t, s, running.ID, "new")
	for _, m := range []ports.Mission{old, noEnd, recent} {
		wantArchived(t, s, m)
	}

	// A mission put again is live again; archived again later, the newest
	// archived record is the one found.
	old2 := old
	old2.Summary, old2.EndedAt = "second life", clock.Now()
	mustPut(t, s, old2)
	wantIDs(t, s, running.ID, "new", "old")
	wantArchived(t, s, old) // still the archived copy
	clock.Advance(25 * time.Hour)
	mustPut(t, s, portstest.MinimalMission("new"))
	wantIDs(t, s, running.ID, "new")
	wantArchived(t, s, old2)
	s.Close()
	s = openStore(t, cfg)
	wantArchived(t, s, old2)
	if n := len(archiveLines(t, dir)); n != 4 {
		t.Fatalf("archive has %d lines", n)
	}
	testkit.OnlyFiles(t, dir, MissionsArchiveFile, MissionsFile)
	if m := testkit.Mode(t, filepath.Join(dir, MissionsArchiveFile)); m != 0o600 {
		t.Fatalf("archive mode %v", m)
	}

	// Negative retention keeps everything live.
	keepAll := openStore(t, MissionStoreConfig{Dir: t.TempDir(), Retention: -1, Clock: clock})
	mustPut(t, keepAll, old)
	wantIDs(t, keepAll, "old")
}

// A crash after the archive append but before missions.json is replaced
// leaves a mission in both: live wins, and nothing is lost afterwards.
func TestMissionStoreCrashBetweenArchiveAndLive(t *testing.T) {
	dir := t.TempDir()
	clock := newTestClock()
	old := terminal("old", ports.MissionCompleted, clock.Now().Add(-48*time.Hour))
	live := old
	live.Summary = "the live copy"
	s := openStore(t, MissionStoreConfig{Dir: dir, Clock: clock, Retention: -1})
	mustPut(t, s, live, portstest.MinimalMission("other"))
	s.Close()
	line, _ := json.Marshal(old)
	if err := os.WriteFile(filepath.Join(dir, MissionsArchiveFile), append(line, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, MissionStoreConfig{Dir: dir, Clock: clock})
	ms, _ := s.Load()
	if len(ms) != 2 || !portstest.EqualMissions(ms[0], live) {
		t.Fatalf("Load = %+v, want the live copy first", ms)
	}
	wantArchived(t, s, old)
	// The next write archives the live copy again.
	mustPut(t, s, portstest.MinimalMission("other"))
	wantIDs(t, s, "other")
	wantArchived(t, s, live)
	s.Close()
	s = openStore(t, MissionStoreConfig{Dir: dir, Clock: clock})
	wantIDs(t, s, "other")
	wantArchived(t, s, live)
}

func TestMissionStoreTornArchive(t *testing.T) {
	dir := t.TempDir()
	clock := newTestClock()
	a := terminal("a", ports.MissionCompleted, clock.Now().Add(-48*time.Hour))
	b := terminal("b", ports.MissionFailed, clock.Now().Add(-48*time.Hour))
	torn := terminal("torn", ports.MissionFailed, clock.Now().Add(-48*time.Hour))
	la, _ := json.Marshal(a)
	lb, _ := json.Marshal(b)
	lt, _ := json.Marshal(torn)
	var content []byte
	content = append(append(content, la...), '\n')
	content = append(content, "\x00\x00\x00\n"...) // unwritten blocks from a crash
	content = append(append(content, lb...), '\n')
	content = append(content, lt[:len(lt)/2]...) // crash mid-append
	if err := os.WriteFile(filepath.Join(dir, MissionsArchiveFile), content, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := MissionStoreConfig{Dir: dir, Clock: clock}
	s := openStore(t, cfg)
	wantArchived(t, s, a)
	wantArchived(t, s, b)
	if _, ok, err := s.Archived("torn"); ok || err != nil {
		t.Fatalf("Archived(torn) = %v, %v", ok, err)
	}
	// The next append replaces the torn tail instead of gluing onto it.
	c := terminal("c", ports.MissionAborted, clock.Now().Add(-48*time.Hour))
	mustPut(t, s, c)
	wantArchived(t, s, c)
	lines := archiveLines(t, dir)
	if len(lines) != 4 || lines[3] != string(mustJSON(t, c)) {
		t.Fatalf("archive lines %q", lines)
	}
	s.Close()
	s = openStore(t, cfg)
	for _, m := range []ports.Mission{a, b, c} {
		wantArchived(t, s, m)
	}
	wantIDs(t, s)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMissionStoreCorruptFile(t *testing.T) {
	for _, content := range []string{
		"",
		"{",
		"null",
		`{"version": 2, "missions": []}`,
		`{"version": 1, "missions": [1]}`,
		`{"version": 1, "missions": [{"mission_id": ""}]}`,
		`{"version": 1, "missions": [{"mission_id": "a", "created_at": "yesterday"}]}`,
		`{"version": 1, "missions": []} {}`,
		"\x00\x01garbage",
	} {
		t.Run(fmt.Sprintf("%.16q", content), func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, MissionsFile)
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := NewMissionStore(MissionStoreConfig{Dir: dir})
			if err == nil {
				s.Close()
				t.Fatal("opened a corrupt missions.json")
			}
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name %s", err, p)
			}
			if got, _ := os.ReadFile(p); string(got) != content {
				t.Fatalf("file changed to %q", got)
			}
		})
	}
	// A missing file is a first start, and an empty list is fine.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, MissionsFile), []byte(`{"version": 1, "missions": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, openStore(t, MissionStoreConfig{Dir: dir}))
	if _, err := NewMissionStore(MissionStoreConfig{}); err == nil {
		t.Fatal("opened a store without a dir")
	}
}

// A failed write reports ErrStoreUnavailable and changes nothing in memory,
// and the store recovers when the disk does.
func TestMissionStoreFailedWrite(t *testing.T) {
	dir := t.TempDir()
	clock := newTestClock()
	cfg := MissionStoreConfig{Dir: dir, Clock: clock}
	s := openStore(t, cfg)
	m1 := portstest.SampleMission(1)
	mustPut(t, s, m1)

	// missions.json becomes something rename cannot replace (running as
	// root, a read-only dir would not stop the write).
	p := filepath.Join(dir, MissionsFile)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(p, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	m1b := m1
	m1b.State = ports.MissionSuspended
	err := s.Put(context.Background(), m1b, portstest.MinimalMission("m2"))
	if !errors.Is(err, ports.ErrStoreUnavailable) || !strings.Contains(err.Error(), p) {
		t.Fatalf("Put = %v, want ErrStoreUnavailable naming %s", err, p)
	}
	ms, _ := s.Load()
	if len(ms) != 1 || !portstest.EqualMissions(ms[0], m1) {
		t.Fatalf("Load after a failed write = %+v", ms)
	}

	// The disk recovers: the next write holds what was durable plus the
	// new change, not the failed one.
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, portstest.MinimalMission("m3"))
	wantIDs(t, s, "m3", m1.ID)
	got := fileMissions(t, dir)
	if len(got) != 2 || !portstest.EqualMissions(got[1], m1) {
		t.Fatalf("file %+v", got)
	}

	// The archive cannot be written: the expired mission stays live.
	ap := filepath.Join(dir, MissionsArchiveFile)
	if err := os.Mkdir(ap, 0o700); err != nil {
		t.Fatal(err)
	}
	old := terminal("old", ports.MissionCompleted, clock.Now().Add(-48*time.Hour))
	if err := s.Put(context.Background(), old); !errors.Is(err, ports.ErrStoreUnavailable) {
		t.Fatalf("Put = %v, want ErrStoreUnavailable", err)
	}
	wantIDs(t, s, "m3", m1.ID)
	if _, ok, _ := s.Archived("old"); ok {
		t.Fatal("archived although the archive write failed")
	}
	if err := os.Remove(ap); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, old)
	wantArchived(t, s, old)
	s.Close()
	s = openStore(t, cfg)
	wantIDs(t, s, "m3", m1.ID)
	wantArchived(t, s, old)
}

// Crash test: a child process Puts in a loop and is killed with SIGKILL at
// random moments; every Put it reported done must be on disk afterwards.

const (
	crashDirEnv = "FILESTORE_CRASH_DIR"
	crashRunEnv = "FILESTORE_CRASH_RUN"
)

// TestHelperWriter is the child of TestMissionStoreCrash.
func TestHelperWriter(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("only run as the child of TestMissionStoreCrash")
	}
	// A short retention so that archiving is also interrupted.
	s, err := NewMissionStore(MissionStoreConfig{Dir: dir, Retention: 20 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var out sync.Mutex
	report := func(id string, iter int) {
		out.Lock()
		defer out.Unlock()
		// One write per line: a kill cannot tear it.
		os.Stdout.WriteString(fmt.Sprintf("put %s %d\n", id, iter))
	}
	run := os.Getenv(crashRunEnv)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for j := 0; ; j++ {
				m := portstest.MinimalMission(fmt.Sprintf("r%s-w%d-m%d", run, w, j))
				m.CreatedAt = time.Now()
				for it := 1; it <= 6; it++ {
					m.Iteration, m.UpdatedAt = it, time.Now()
					m.State = ports.MissionRunning
					if it == 6 {
						m.State, m.EndedAt = ports.MissionCompleted, time.Now()
					}
					if err := s.Put(context.Background(), m); err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(2)
					}
					report(m.ID, it)
				}
			}
		})
	}
	wg.Wait()
}

func TestMissionStoreCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	printed := make(map[string]int)
	for run := range 12 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashRunEnv+"="+strconv.Itoa(run))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Reaped even when the test fails before it waits.
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		record := func(line string) {
			var id string
			var it int
			if _, err := fmt.Sscanf(line, "put %s %d", &id, &it); err == nil {
				printed[id] = max(printed[id], it)
			}
		}
		// Kill only once it is writing, at a random moment.
		select {
		case line, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("child exited early: %s", stderr.String())
			}
			record(line)
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatal("child wrote nothing")
		}
		time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		for line := range lines {
			record(line)
		}
		cmd.Wait()
		if strings.Contains(stderr.String(), "mission store") {
			t.Fatalf("child failed: %s", stderr.String())
		}
		checkCrashState(t, dir, printed)
	}
	t.Logf("%d missions put by %d killed writers", len(printed), 12)
	if len(printed) < 12 {
		t.Fatalf("only %d missions written", len(printed))
	}
}

func checkCrashState(t *testing.T, dir string, printed map[string]int) {
	t.Helper()
	fileMissions(t, dir) // parses as a whole
	s, err := NewMissionStore(MissionStoreConfig{Dir: dir, Retention: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	live, _ := s.Load()
	byID := make(map[string]ports.Mission)
	for _, m := range live {
		byID[m.ID] = m
	}
	for id, it := range printed {
		m, ok := byID[id]
		if !ok {
			if m, ok, err = s.Archived(id); err != nil {
				t.Fatal(err)
			}
		}
		if !ok {
			t.Fatalf("mission %s (put done at iteration %d) lost", id, it)
		}
		if m.Iteration < it {
			t.Fatalf("mission %s at iteration %d, Put of %d had returned", id, m.Iteration, it)
		}
	}
}

func TestMissionStoreMaxFinished(t *testing.T) {
	dir := t.TempDir()
	clock := newTestClock()
	s := openStore(t, MissionStoreConfig{Dir: dir, Clock: clock, MaxFinished: 3})
	now := clock.Now()
	var all []ports.Mission
	for i := range 5 {
		m := portstest.MinimalMission(fmt.Sprintf("done-%d", i))
		m.State = ports.MissionCompleted
		m.CreatedAt = now.Add(time.Duration(i) * time.Second)
		m.EndedAt = now.Add(time.Duration(10-i) * time.Second) // done-4 ended first
		all = append(all, m)
	}
	for i := range 2 {
		m := portstest.MinimalMission(fmt.Sprintf("running-%d", i))
		m.State = ports.MissionRunning
		m.CreatedAt = now
		all = append(all, m)
	}
	if err := s.Put(context.Background(), all...); err != nil {
		t.Fatal(err)
	}
	live, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range live {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	if want := []string{"done-0", "done-1", "done-2", "running-0", "running-1"}; !slices.Equal(ids, want) {
		t.Fatalf("live %v, want %v (the two that ended first archived)", ids, want)
	}
	for _, id := range []string{"done-3", "done-4"} {
		if m, ok, err := s.Archived(id); err != nil || !ok || m.State != ports.MissionCompleted {
			t.Fatalf("%s not archived: %v %v %+v", id, ok, err, m)
		}
	}
	// A larger cap is exceeded by an eighth before the ones that ended
	// first are archived, all in one append.
	s3 := openStore(t, MissionStoreConfig{Dir: t.TempDir(), Clock: clock, MaxFinished: 16})
	for i := range 19 {
		m := portstest.MinimalMission(fmt.Sprintf("m-%02d", i))
		m.State, m.EndedAt = ports.MissionCompleted, now.Add(time.Duration(i)*time.Second)
		mustPut(t, s3, m)
		want := i + 1
		if i == 18 {
			want = 16
		}
		if live, _ := s3.Load(); len(live) != want {
			t.Fatalf("after %d ended missions %d live, want %d", i+1, len(live), want)
		}
	}
	for i := range 3 {
		if _, ok, _ := s3.Archived(fmt.Sprintf("m-%02d", i)); !ok {
			t.Fatalf("m-%02d, among the first to end, not archived", i)
		}
	}
	// A negative cap keeps every finished mission live.
	s2 := openStore(t, MissionStoreConfig{Dir: t.TempDir(), Clock: clock, MaxFinished: -1})
	if err := s2.Put(context.Background(), all...); err != nil {
		t.Fatal(err)
	}
	if live, _ := s2.Load(); len(live) != 7 {
		t.Fatalf("uncapped store keeps %d of 7", len(live))
	}
}

// The archive rotates past its bound: two generations stay findable, the
// oldest goes, and a reopened store finds what it found before.
func TestMissionStoreArchiveRotates(t *testing.T) {
	dir := t.TempDir()
	clock := newTestClock()
	cfg := MissionStoreConfig{Dir: dir, Clock: clock, MaxFinished: -1, Retention: time.Hour, MaxArchiveBytes: 2048}
	s := openStore(t, cfg)
	var archived []ports.Mission
	for i := range 60 {
		m := terminal(fmt.Sprintf("m%02d", i), ports.MissionCompleted, clock.Now().Add(-48*time.Hour))
		mustPut(t, s, m)
		mustPut(t, s, portstest.MinimalMission("keep")) // a write archives m
		archived = append(archived, m)
	}
	st, err := os.Stat(filepath.Join(dir, MissionsArchiveFile))
	if err != nil || st.Size() > 2048+4096 {
		t.Fatalf("current archive: %v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missions-archive.1.jsonl")); err != nil {
		t.Fatalf("no rotated generation: %v", err)
	}
	check := func(s *MissionStore) {
		t.Helper()
		found, gone := 0, 0
		for i, m := range archived {
			got, ok, err := s.Archived(m.ID)
			switch {
			case err != nil:
				t.Fatalf("Archived(%s): %v", m.ID, err)
			case ok:
				found++
				if got.ID != m.ID {
					t.Fatalf("Archived(%s) = %s", m.ID, got.ID)
				}
			default:
				gone++
				if i >= len(archived)-5 {
					t.Fatalf("a recent mission %s is not findable", m.ID)
				}
			}
		}
		if gone == 0 || found == 0 {
			t.Fatalf("found %d, gone %d: want the oldest gone and the newer found", found, gone)
		}
	}
	check(s)
	s.Close()
	check(openStore(t, cfg))
}
