package filestore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// openQuiet opens a store that never rewrites missions.json on its own, so
// a test sees what the journal alone holds.
func openQuiet(t *testing.T, dir string) *MissionStore {
	t.Helper()
	s := openStore(t, MissionStoreConfig{Dir: dir, Retention: -1})
	s.idleDelay = time.Hour
	return s
}

// copyDir copies the data dir's files as a crash would leave them: what is
// on disk now, with the store still open.
func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

func withState(m ports.Mission, state ports.MissionState, it int) ports.Mission {
	m.State, m.Iteration = state, it
	return m
}

func wantMission(t *testing.T, s *MissionStore, want ports.Mission) {
	t.Helper()
	ms, _ := s.Load()
	for _, m := range ms {
		if m.ID == want.ID {
			if !portstest.EqualMissions(m, want) {
				t.Fatalf("mission %s = %+v, want %+v", want.ID, m, want)
			}
			return
		}
	}
	t.Fatalf("mission %s not live", want.ID)
}

// A change to a live mission is one journal append, not a rewrite of
// missions.json; a crash then finds it by replaying the journal.
func TestMissionJournalReplaysAfterCrash(t *testing.T) {
	dir := t.TempDir()
	s := openQuiet(t, dir)
	m := portstest.SampleMission(1)
	other := portstest.MinimalMission("other")
	mustPut(t, s, m, other) // new: rewrites missions.json
	before := s.writes.Load()
	running := withState(m, ports.MissionRunning, 2)
	mustPut(t, s, running)
	done := withState(running, ports.MissionCompleted, 3)
	mustPut(t, s, done, withState(other, ports.MissionRunning, 1))
	if w := s.writes.Load() - before; w != 2 {
		t.Fatalf("%d writes for two changes, want 2 journal appends", w)
	}
	for _, fm := range fileMissions(t, dir) {
		if fm.ID == m.ID && !portstest.EqualMissions(fm, m) {
			t.Fatalf("missions.json rewritten by a change: %+v", fm)
		}
	}

	crashed := copyDir(t, dir)
	r := openQuiet(t, crashed)
	wantMission(t, r, done)
	wantMission(t, r, withState(other, ports.MissionRunning, 1))

	// The replayed store goes on appending to the same journal.
	again := withState(done, ports.MissionCompleted, 4)
	mustPut(t, r, again)
	r2 := openQuiet(t, copyDir(t, crashed))
	wantMission(t, r2, again)

	// Close leaves missions.json whole for readers of the data dir.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, fm := range fileMissions(t, crashed) {
		if fm.ID == m.ID && !portstest.EqualMissions(fm, again) {
			t.Fatalf("missions.json after Close: %+v", fm)
		}
	}
}

// Once idle, the store rewrites missions.json with what only the journal
// held, and the journal's lines become stale: a later open ignores them.
func TestMissionJournalIdleCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, MissionStoreConfig{Dir: dir})
	m := portstest.SampleMission(1)
	mustPut(t, s, m)
	running := withState(m, ports.MissionRunning, 2)
	mustPut(t, s, running)
	settle(t, s)
	if got := fileMissions(t, dir); !portstest.EqualMissions(got[0], running) {
		t.Fatalf("missions.json after idle: %+v", got[0])
	}
	// The stale journal still holds the change; a reopen must not apply
	// it over a newer missions.json.
	crashed := copyDir(t, dir)
	journal, err := os.ReadFile(filepath.Join(crashed, MissionsJournalFile))
	if err != nil {
		t.Fatal(err)
	}
	stale := bytes.Replace(journal, []byte(`"iteration":2`), []byte(`"iteration":99`), 1)
	if bytes.Equal(stale, journal) {
		t.Fatalf("journal without the change:\n%s", journal)
	}
	if err := os.WriteFile(filepath.Join(crashed, MissionsJournalFile), stale, 0o600); err != nil {
		t.Fatal(err)
	}
	wantMission(t, openQuiet(t, crashed), running)
}

// A crash mid-append leaves a torn batch: never reported durable, so it is
// not applied, and the next append replaces it.
func TestMissionJournalTornBatch(t *testing.T) {
	for name, tail := range map[string]string{
		"no newline":        `[{"mission_id":"m-1","state":"fail`,
		"zeroes":            "\x00\x00\x00\x00\n",
		"a record cut, one": `[{"mission_id":"m-1"},` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := openQuiet(t, dir)
			m := portstest.SampleMission(1)
			mustPut(t, s, m)
			running := withState(m, ports.MissionRunning, 2)
			mustPut(t, s, running)
			crashed := copyDir(t, dir)
			f, err := os.OpenFile(filepath.Join(crashed, MissionsJournalFile), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(tail); err != nil {
				t.Fatal(err)
			}
			f.Close()

			r := openQuiet(t, crashed)
			wantMission(t, r, running)
			next := withState(running, ports.MissionSuspended, 3)
			mustPut(t, r, next)
			data, _ := os.ReadFile(filepath.Join(crashed, MissionsJournalFile))
			if bytes.Contains(data, []byte(tail)) {
				t.Fatalf("torn batch left in the journal:\n%q", data)
			}
			wantMission(t, openQuiet(t, copyDir(t, crashed)), next)
		})
	}
}

// A journal that is not one is refused and left as it is, like a corrupt
// missions.json: starting without it would forget changes.
func TestMissionJournalCorrupt(t *testing.T) {
	m := portstest.SampleMission(1)
	cases := map[string]string{
		"header":            "not a header\n",
		"header version":    `{"journal":2,"gen":1}` + "\n",
		"record without id": `{"journal":1,"gen":1}` + "\n" + `[{"state":"running"}]` + "\n",
		"record not json":   `{"journal":1,"gen":1}` + "\n" + `[{"mission_id":"m-1","iteration":"x"}]` + "\n",
	}
	for name, journal := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := openQuiet(t, dir)
			mustPut(t, s, m) // missions.json generation 1
			s.Close()
			p := filepath.Join(dir, MissionsJournalFile)
			if err := os.WriteFile(p, []byte(journal), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := NewMissionStore(MissionStoreConfig{Dir: dir})
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "corrupt") {
				t.Fatalf("open = %v, want an error naming %s", err, p)
			}
			if data, _ := os.ReadFile(p); string(data) != journal {
				t.Fatalf("journal changed: %q", data)
			}
		})
	}
}

// A full journal makes the next change a rewrite of missions.json, which
// starts the journal over.
func TestMissionJournalFull(t *testing.T) {
	dir := t.TempDir()
	s := openQuiet(t, dir)
	s.journal.max = 2048
	m := portstest.SampleMission(1)
	mustPut(t, s, m)
	for i := range 40 {
		mustPut(t, s, withState(m, ports.MissionRunning, i+2))
		if s.journal.end > 2048+4096 {
			t.Fatalf("journal at %d bytes", s.journal.end)
		}
	}
	last := withState(m, ports.MissionRunning, 41)
	if got := fileMissions(t, dir); got[0].Iteration < 2 {
		t.Fatalf("missions.json never rewritten: iteration %d", got[0].Iteration)
	}
	wantMission(t, openQuiet(t, copyDir(t, dir)), last)
}

// FuzzMissionJournal opens a store on a missions.json and an arbitrary
// journal: it either refuses with an error or opens, and then a change and
// a reopen keep it.
func FuzzMissionJournal(f *testing.F) {
	rec := func(it int) string {
		b, _ := json.Marshal(withState(portstest.MinimalMission("m-1"), ports.MissionRunning, it))
		return string(b)
	}
	f.Add(`{"journal":1,"gen":1}` + "\n[" + rec(2) + "]\n")
	f.Add(`{"journal":1,"gen":1}` + "\n[" + rec(2) + "," + rec(3) + "]\n[" + rec(4))
	f.Add(`{"journal":1,"gen":0}` + "\n[" + rec(2) + "]\n")
	f.Add(`{"journal":1,"gen":1}` + "\n[]\n[null]\n")
	f.Add("")
	f.Add("\n\n")
	f.Fuzz(func(t *testing.T, journal string) {
		dir := t.TempDir()
		s, err := NewMissionStore(MissionStoreConfig{Dir: dir, Retention: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(context.Background(), portstest.MinimalMission("m-1")); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if err := os.WriteFile(filepath.Join(dir, MissionsJournalFile), []byte(journal), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err = NewMissionStore(MissionStoreConfig{Dir: dir, Retention: -1})
		if err != nil {
			return
		}
		s.idleDelay = time.Hour
		want := withState(portstest.MinimalMission("m-1"), ports.MissionSuspended, 100)
		if err := s.Put(context.Background(), want); err != nil {
			t.Fatal(err)
		}
		r, err := NewMissionStore(MissionStoreConfig{Dir: copyDir(t, dir), Retention: -1})
		if err != nil {
			t.Fatalf("reopen after a change: %v", err)
		}
		defer r.Close()
		ms, _ := r.Load()
		found := false
		for _, m := range ms {
			if m.ID == want.ID {
				found = portstest.EqualMissions(m, want)
			}
		}
		if !found {
			t.Fatalf("change lost; live %s", fmt.Sprint(ms))
		}
		s.Close()
	})
}
