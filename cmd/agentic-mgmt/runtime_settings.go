package main

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
)

// setting is one variable a runtime reads, declared once in its catalog
// entry: loadConfig reads and checks it, --help shows its flag, and the
// README's configuration table has its row (TestREADMEDocumentsTheCatalog).
type setting struct {
	// Env is the variable (the env file's key too).
	Env string
	// Flag overrides Env on the command line; "" for none.
	Flag string
	// Default is the value when Env is unset. DefaultDoc describes it
	// instead (Markdown) where it is derived, e.g. from the data dir.
	Default, DefaultDoc string
	// Choices, when set, are the only values accepted.
	Choices []string
	// Doc is the README row's meaning (Markdown); Help, when set, is the
	// flag's shorter line instead.
	Doc, Help string
}

// settingValues are a runtime's settings as read, by variable: each one's
// value, or its Default when unset.
type settingValues map[string]string

func (s setting) defaultCell() string {
	switch {
	case s.DefaultDoc != "":
		return s.DefaultDoc
	case s.Default != "":
		return "`" + s.Default + "`"
	}
	return "unset"
}

// readmeRow is the setting's row of the README's configuration table.
func (s setting) readmeRow() string {
	return "| `" + s.Env + "` | " + s.defaultCell() + " | " + s.Doc + " |"
}

// usage is the flag's line in --help.
func (s setting) usage() string {
	help := s.Help
	if help == "" {
		help = s.Doc
	}
	return unmark(help) + " (env " + s.Env + ", default " + unmark(s.defaultCell()) + ")"
}

// unmark drops Markdown's code quotes: the flag package would take a quoted
// word for the flag's argument name.
func unmark(s string) string { return strings.ReplaceAll(s, "`", "") }

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// checkURL refuses an engine address that is set but not a URL with a
// scheme (unix://…, tcp://…, qemu:///system), which the engine's client
// would otherwise take for something else or refuse only when first used.
func checkURL(v string) error {
	if v == "" {
		return nil
	}
	if u, err := url.Parse(v); err != nil || u.Scheme == "" {
		return fmt.Errorf("%q is not a URL such as unix:///path/to.sock", v)
	}
	return nil
}

// registerRuntimeFlags adds each runtime setting's flag to fs and returns
// which variable each flag overrides.
func registerRuntimeFlags(fs *flag.FlagSet) map[string]string {
	out := map[string]string{}
	for _, e := range runtimeCatalog {
		for _, s := range e.Settings {
			if s.Flag != "" {
				fs.String(s.Flag, "", s.usage())
				out[s.Flag] = s.Env
			}
		}
	}
	return out
}

// configureRuntimes reads every runtime's settings (whether or not the
// runtime is used, so a mistake shows at once) into its typed options, by
// runtime name. get is the configuration's lookup with a default.
func configureRuntimes(get func(key, def string) string, cfg Config) (map[string]any, error) {
	out := map[string]any{}
	for _, e := range runtimeCatalog {
		v := settingValues{}
		for _, s := range e.Settings {
			v[s.Env] = get(s.Env, s.Default)
			if s.Choices != nil && !slices.Contains(s.Choices, v[s.Env]) {
				return nil, fmt.Errorf("%s %q: want %s", s.Env, v[s.Env], orList(s.Choices))
			}
		}
		opts, err := e.configure(v, cfg)
		if err != nil {
			return nil, fmt.Errorf("runtime %s: %w", e.Name, err)
		}
		out[e.Name] = opts
	}
	return out, nil
}

// defaultValues are an entry's settings all unset.
func (e runtimeEntry) defaultValues() settingValues {
	v := settingValues{}
	for _, s := range e.Settings {
		v[s.Env] = s.Default
	}
	return v
}

// Words derived from the catalog, for the generic settings that name
// runtimes (AGENTIC_RUNTIMES, AGENTIC_TASK_RUNTIME), in Markdown.

// foundDoc says which runtimes are used when AGENTIC_RUNTIMES is unset.
func foundDoc() string {
	var parts []string
	for _, e := range runtimeCatalog {
		parts = append(parts, "`"+e.Name+"` "+e.FoundDoc)
	}
	return "unset: those found, " + strings.Join(parts, "; ")
}

// runtimesDoc is AGENTIC_RUNTIMES's meaning.
func runtimesDoc() string {
	names := make([]string, len(runtimeCatalog))
	for i, e := range runtimeCatalog {
		names[i] = "`" + e.Name + "`"
	}
	return "runtimes that provision environments, comma-separated, of " + orList(names) +
		" (`GET /api/v1/runtimes` lists those a server offers, `agentic-mgmt --help` what each is)"
}

// defaultRuntimeDoc says which runtime a task naming none runs on.
func defaultRuntimeDoc() string {
	ranked := rankedRuntimes()
	var b strings.Builder
	for i, e := range ranked {
		b.WriteString("`" + e.Name + "`")
		if i < len(ranked)-1 {
			b.WriteString(" where it answers when the task is submitted, else ")
		}
	}
	return b.String()
}

// readmeRuntimeRows are the rows of the README's configuration table that
// the catalog owns, in order: AGENTIC_RUNTIMES, AGENTIC_TASK_RUNTIME, then
// every runtime's settings.
func readmeRuntimeRows() []string {
	rows := []string{
		"| `AGENTIC_RUNTIMES` | " + foundDoc() + " | " + runtimesDoc() + " |",
		"| `AGENTIC_TASK_RUNTIME` | " + defaultRuntimeDoc() + " | runtime of a task whose manifest names none |",
	}
	for _, e := range runtimeCatalog {
		for _, s := range e.Settings {
			rows = append(rows, s.readmeRow())
		}
	}
	return rows
}

// runtimesUsage ends --help: each runtime, what it is and when it is found.
func runtimesUsage(w io.Writer) {
	fmt.Fprintln(w, "\nRuntimes (AGENTIC_RUNTIMES; unset: those found; GET /api/v1/runtimes lists those a server offers):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range runtimeCatalog {
		fmt.Fprintf(tw, "  %s\t%s; found %s\n", e.Name, unmark(e.Help), unmark(e.FoundDoc))
	}
	_ = tw.Flush()
}
