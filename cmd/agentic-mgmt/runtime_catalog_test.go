package main

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The catalog is the one list of runtimes: each entry complete, names,
// variables and flags unique, and nothing of a runtime written elsewhere.
func TestCatalogInvariants(t *testing.T) {
	names, envs, flags := map[string]bool{}, map[string]string{}, map[string]string{}
	for flag, env := range flagEnv {
		flags[flag], envs[env] = "the generic configuration", "the generic configuration"
	}
	ranks := map[int]string{}
	for _, e := range runtimeCatalog {
		if names[e.Name] {
			t.Errorf("runtime %q listed twice", e.Name)
		}
		names[e.Name] = true
		if !regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString(e.Name) {
			t.Errorf("runtime name %q: want lower case, a word of AGENTIC_RUNTIMES", e.Name)
		}
		if e.Help == "" || e.FoundDoc == "" || e.HowTo == "" || strings.Contains(e.Help, "\n") {
			t.Errorf("runtime %s: want one line of Help, a FoundDoc and a HowTo", e.Name)
		}
		if e.configure == nil || e.found == nil || e.build == nil {
			t.Errorf("runtime %s: Found and New are required", e.Name)
		}
		if e.DefaultRank < 0 {
			t.Errorf("runtime %s: rank %d", e.Name, e.DefaultRank)
		}
		if other, ok := ranks[e.DefaultRank]; ok && e.DefaultRank > 0 {
			t.Errorf("runtimes %s and %s share the rank %d: the default would depend on the catalog's order", other, e.Name, e.DefaultRank)
		}
		ranks[e.DefaultRank] = e.Name
		for _, s := range e.Settings {
			if s.Env == "" || s.Doc == "" {
				t.Errorf("runtime %s: setting %+v: want a variable and its Doc (the README's row)", e.Name, s)
			}
			if other, ok := envs[s.Env]; ok {
				t.Errorf("runtime %s: %s is read by %s too", e.Name, s.Env, other)
			}
			envs[s.Env] = e.Name
			if s.Flag != "" {
				if other, ok := flags[s.Flag]; ok {
					t.Errorf("runtime %s: flag -%s is %s's too", e.Name, s.Flag, other)
				}
				flags[s.Flag] = e.Name
			}
			if s.Choices != nil && s.Default != "" && !slices.Contains(s.Choices, s.Default) {
				t.Errorf("runtime %s: %s's default %q is not one of its choices %v", e.Name, s.Env, s.Default, s.Choices)
			}
			if strings.Contains(s.Doc, "|") || strings.Contains(s.DefaultDoc, "|") {
				t.Errorf("runtime %s: %s's docs hold a '|', which would split its README row", e.Name, s.Env)
			}
		}
		// The catalog's defaults must configure: a Config made by hand
		// (and a server given no settings) gets them.
		if _, err := e.options(Config{DataDir: t.TempDir()}); err != nil {
			t.Errorf("runtime %s: its defaults do not configure: %v", e.Name, err)
		}
	}
	if len(rankedRuntimes()) == 0 {
		t.Error("no runtime has a DefaultRank: tasks naming none have nowhere to run")
	}
	// Tests get each runtime's engine by its name (cmd/internal/harness).
	if got, want := harness.EngineNames(), slices.Sorted(slices.Values(runtimeNames())); !slices.Equal(got, want) {
		t.Errorf("harness engines %v, catalog %v: each runtime needs its test engine", got, want)
	}
}

// The host runtime needs no engine: it declares the catalog's name.
func TestHostEntryMakesTheHostAdapter(t *testing.T) {
	e, ok := catalogEntry(hostRuntime.Name)
	if !ok || !e.Found(Config{}) {
		t.Fatal("host must always be found")
	}
	rt, closer, err := e.New(Config{DataDir: t.TempDir()}, runtimeDeps{})
	if err != nil {
		t.Fatal(err)
	}
	if closer != nil {
		defer closer()
	}
	if c := rt.Capabilities(); c.Runtime != e.Name || c.Isolation != ports.KindHost {
		t.Errorf("capabilities %+v; want runtime %q", c, e.Name)
	}
}

// A task naming no runtime goes to the available runtime of the highest
// rank, else to the lowest ranked one; AGENTIC_TASK_RUNTIME overrides.
func TestDefaultTaskRuntimeFollowsTheRanks(t *testing.T) {
	ranked := rankedRuntimes()
	for i := 1; i < len(ranked); i++ {
		if ranked[i-1].DefaultRank <= ranked[i].DefaultRank {
			t.Fatalf("not ordered: %v", ranked)
		}
	}
	last := ranked[len(ranked)-1].Name
	avail := func(names ...string) *Runtimes {
		r := &Runtimes{Available: map[string]ports.Runtime{}}
		for _, n := range names {
			r.Available[n] = nil
		}
		return r
	}
	for _, c := range []struct {
		cfg       Config
		available []string
		want      string
	}{
		{Config{}, nil, last},
		{Config{}, runtimeNames(), ranked[0].Name},
		{Config{TaskRuntime: "libvirt"}, runtimeNames(), "libvirt"},
		// Today's choice: docker where it answers, else host; never libvirt.
		{Config{}, []string{"host", "docker", "libvirt"}, "docker"},
		{Config{}, []string{"host", "libvirt"}, "host"},
		{Config{}, []string{"libvirt"}, "host"},
		{Config{}, []string{"docker"}, "docker"},
	} {
		if got := defaultTaskRuntime(c.cfg, avail(c.available...)); got != c.want {
			t.Errorf("%+v with %v: %q, want %q", c.cfg, c.available, got, c.want)
		}
	}
}

// configTable reads the README's configuration table: its rows as written,
// and the variables each row's first cell names.
func configTable(t *testing.T) (rows []string, vars map[string][]string) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Ports and configuration\n")
	if !ok {
		t.Fatal("README: no section \"Ports and configuration\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	vars = map[string][]string{}
	code := regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		rows = append(rows, line)
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		for _, m := range code.FindAllStringSubmatch(first, -1) {
			vars[m[1]] = append(vars[m[1]], line)
		}
	}
	if len(rows) == 0 {
		t.Fatal("README: the configuration table has no rows")
	}
	return rows, vars
}

// The README's configuration table has the catalog's rows exactly, together
// and in order (a new runtime's settings included), and documents no
// runtime variable the catalog lacks. On failure, the rows to paste.
func TestREADMEDocumentsTheCatalog(t *testing.T) {
	rows, vars := configTable(t)
	want := readmeRuntimeRows()
	at := slices.Index(rows, want[0])
	if at < 0 || at+len(want) > len(rows) || !slices.Equal(rows[at:at+len(want)], want) {
		t.Errorf("README.md's configuration table must hold these rows, together and in this order (from the runtime catalog):\n%s", strings.Join(want, "\n"))
	}
	for _, e := range runtimeCatalog {
		for _, s := range e.Settings {
			if n := len(vars[s.Env]); n != 1 {
				t.Errorf("README: %s is in %d rows, want 1", s.Env, n)
			}
		}
	}
	// A variable named after a runtime belongs to its entry, unless the
	// generic configuration reads it (AGENTIC_HOST_AGENTS is the supervisor's).
	generic := slices.Collect(maps.Values(flagEnv))
	for v := range vars {
		for _, e := range runtimeCatalog {
			if slices.Contains(generic, v) {
				continue
			}
			prefix := "AGENTIC_" + strings.ToUpper(strings.ReplaceAll(e.Name, "-", "_")) + "_"
			if strings.HasPrefix(v, prefix) && !slices.ContainsFunc(e.Settings, func(s setting) bool { return s.Env == v }) {
				t.Errorf("README documents %s, which runtime %s's entry does not declare", v, e.Name)
			}
		}
	}
}
