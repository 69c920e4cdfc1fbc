package task

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Manifest is a task's manifest (the README's "Tasks"), every field honoured.
type Manifest struct {
	Version     string
	Kind        string
	Metadata    Metadata
	Repository  *Repository
	Claude      *Claude
	Command     *Command
	Environment Environment
	Secrets     []Secret
	Lifecycle   Lifecycle
}

// Metadata names a task.
type Metadata struct {
	Name   string
	ID     string
	Labels map[string]string
}

// Repository is what is staged into the workspace.
type Repository struct {
	URL     string
	Branch  string
	Commit  string
	Subpath string
}

// Claude is a headless claude run.
type Claude struct {
	Prompt          string
	Model           string
	MaxTurns        int
	AllowedTools    []string
	SkipPermissions bool
}

// Command is a plain process instead of claude.
type Command struct {
	Argv []string
}

// Environment is where the task runs.
type Environment struct {
	Runtime      string
	Image        string
	CPUs         float64
	MemoryMB     int
	DiskGB       int
	NetworkMode  ports.NetworkMode
	AllowedHosts []string
	// Isolation is a tier of the runtime's (ports.TierGVisor), Placement
	// where its scheduler may put the environment; whether the runtime
	// offers them is for provisioning to say.
	Isolation string
	Placement ports.Placement
}

// Secret sources.
const (
	SecretFromEnv  = inject.SourceEnv
	SecretFromFile = inject.SourceFile
)

// Secret is a value put into the run's environment as Name, or, when it
// has Inject, a value the run never sees: Name holds a placeholder and the
// server adds the value to requests bound for Inject.Host (core/inject).
type Secret struct {
	Name     string
	Source   string
	Key      string
	Required bool
	Inject   *inject.Spec
}

// Failure actions.
const (
	FailureDestroy  = "destroy"
	FailurePreserve = "preserve"
)

// Lifecycle bounds a task and says what happens after it.
type Lifecycle struct {
	Timeout          time.Duration
	IdleTimeout      time.Duration
	FailureAction    string
	PreserveFor      time.Duration
	ArtifactPatterns []string
	// MaxCostUSD stops the run's model requests through injected secrets,
	// and fails the task, once their usage costs that much (0: no budget).
	MaxCostUSD float64
}

// Defaults of fields a manifest leaves out.
const (
	DefaultTimeout     = 2 * time.Hour
	DefaultPreserveFor = 2 * time.Hour
	maxTimeout         = 7 * 24 * time.Hour
)

// ErrInvalidManifest wraps every reason a manifest is refused; the message
// names the field's path (environment.memory, secrets[1].source).
var ErrInvalidManifest = errors.New("invalid manifest")

// MaxManifestBytes bounds a manifest.
const MaxManifestBytes = 256 << 10

// Parse reads a manifest in YAML (or JSON, which is YAML) and checks every
// field. Unknown fields are refused; `vm:` is accepted as the old name of
// `environment:`.
func Parse(doc []byte) (Manifest, error) {
	if len(doc) > MaxManifestBytes {
		return Manifest{}, fmt.Errorf("%w: larger than %d bytes", ErrInvalidManifest, MaxManifestBytes)
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(&root); err != nil {
		return Manifest{}, fmt.Errorf("%w: not YAML: %v", ErrInvalidManifest, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return Manifest{}, fmt.Errorf("%w: one YAML document only", ErrInvalidManifest)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		return Manifest{}, fmt.Errorf("%w: empty", ErrInvalidManifest)
	}
	p := &parser{}
	m := p.manifest(root.Content[0])
	if len(p.errs) > 0 {
		return Manifest{}, fmt.Errorf("%w: %s", ErrInvalidManifest, strings.Join(p.errs, "; "))
	}
	return m, nil
}

type parser struct{ errs []string }

func (p *parser) fail(at, format string, args ...any) {
	if len(p.errs) < 20 {
		p.errs = append(p.errs, at+": "+fmt.Sprintf(format, args...))
	}
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// fields walks a mapping: each known key to its handler, every other key
// refused, a key given twice refused.
func (p *parser) fields(n *yaml.Node, at string, handlers map[string]func(*yaml.Node, string)) {
	if n.Kind != yaml.MappingNode {
		p.fail(at, "must be a mapping")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		kat := join(at, k)
		if seen[k] {
			p.fail(kat, "given twice")
			continue
		}
		seen[k] = true
		h, ok := handlers[k]
		if !ok {
			p.fail(kat, "unknown field")
			continue
		}
		h(v, kat)
	}
}

func (p *parser) str(n *yaml.Node, at string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.fail(at, "must be a string")
		return ""
	}
	if strings.ContainsRune(n.Value, 0) {
		p.fail(at, "contains a NUL byte")
		return ""
	}
	return n.Value
}

func (p *parser) integer(n *yaml.Node, at string, lo, hi int) int {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		p.fail(at, "must be an integer")
		return 0
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil || v < lo || v > hi {
		p.fail(at, "must be between %d and %d", lo, hi)
		return 0
	}
	return v
}

func (p *parser) boolean(n *yaml.Node, at string) bool {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		p.fail(at, "must be true or false")
		return false
	}
	return n.Value == "true" || n.Value == "True" || n.Value == "TRUE"
}

func (p *parser) strings(n *yaml.Node, at string, max int) []string {
	if n.Kind != yaml.SequenceNode {
		p.fail(at, "must be a list")
		return nil
	}
	if len(n.Content) > max {
		p.fail(at, "at most %d entries", max)
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, c := range n.Content {
		out = append(out, p.str(c, fmt.Sprintf("%s[%d]", at, i)))
	}
	return out
}

func (p *parser) duration(n *yaml.Node, at string) time.Duration {
	s := p.str(n, at)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > maxTimeout {
		p.fail(at, "must be a duration like 90s, 20m or 2h, at most %v", maxTimeout)
		return 0
	}
	return d
}

var sizePattern = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([KMGT])(?:I?B?)?$`)

// size reads 512M, 2G, 1.5Gi, 1T as bytes; a bare number is refused, since
// whether it means bytes or MiB is a guess.
func (p *parser) size(n *yaml.Node, at string) int64 {
	s := ""
	if n.Kind == yaml.ScalarNode {
		s = strings.TrimSpace(n.Value)
	}
	m := sizePattern.FindStringSubmatch(strings.ToUpper(s))
	if m == nil {
		p.fail(at, "must be a size with a unit, like 512M or 2G")
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	mult := map[string]float64{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m[2]]
	b := v * mult
	if b < 1<<20 || b > 1<<44 {
		p.fail(at, "must be between 1M and 16T")
		return 0
	}
	return int64(b)
}

var (
	namePattern     = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$`)
	idPattern       = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$`)
	labelKeyPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._/-]{0,62}$`)
	commitPattern   = regexp.MustCompile(`^[0-9a-fA-F]{4,64}$`)
	hostPattern     = regexp.MustCompile(`^(\*\.)?[a-zA-Z0-9]([a-zA-Z0-9-]{0,62}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,62}[a-zA-Z0-9])?)*(:[0-9]{1,5})?$`)
	scpLikeURL      = regexp.MustCompile(`^[a-zA-Z0-9._-]+@[a-zA-Z0-9.-]+:[^\x00-\x1f]+$`)
	runtimePattern  = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
)

func (p *parser) manifest(n *yaml.Node) Manifest {
	m := Manifest{Version: "1", Kind: "Task"}
	m.Lifecycle = Lifecycle{Timeout: DefaultTimeout, FailureAction: FailureDestroy, PreserveFor: DefaultPreserveFor}
	envSeen := false
	environment := func(v *yaml.Node, at string) {
		if envSeen {
			p.fail(at, "environment and vm are one block (vm is its old name): give one")
			return
		}
		envSeen = true
		m.Environment = p.environment(v, at)
	}
	p.fields(n, "", map[string]func(*yaml.Node, string){
		"version": func(v *yaml.Node, at string) {
			if m.Version = p.str(v, at); m.Version != "1" {
				p.fail(at, `must be "1"`)
			}
		},
		"kind": func(v *yaml.Node, at string) {
			if m.Kind = p.str(v, at); m.Kind != "Task" {
				p.fail(at, "must be Task")
			}
		},
		"metadata":    func(v *yaml.Node, at string) { m.Metadata = p.metadata(v, at) },
		"repository":  func(v *yaml.Node, at string) { r := p.repository(v, at); m.Repository = &r },
		"claude":      func(v *yaml.Node, at string) { c := p.claude(v, at); m.Claude = &c },
		"command":     func(v *yaml.Node, at string) { c := p.command(v, at); m.Command = &c },
		"environment": environment,
		"vm":          environment,
		"secrets":     func(v *yaml.Node, at string) { m.Secrets = p.secrets(v, at) },
		"lifecycle":   func(v *yaml.Node, at string) { p.lifecycle(v, at, &m.Lifecycle) },
	})
	switch {
	case m.Claude == nil && m.Command == nil:
		p.fail("claude", "give claude (a prompt) or command (an argv)")
	case m.Claude != nil && m.Command != nil:
		p.fail("command", "give claude or command, not both")
	}
	return m
}

func (p *parser) metadata(n *yaml.Node, at string) Metadata {
	var md Metadata
	p.fields(n, at, map[string]func(*yaml.Node, string){
		"name": func(v *yaml.Node, at string) {
			if md.Name = p.str(v, at); md.Name != "" && !namePattern.MatchString(md.Name) {
				p.fail(at, "1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit")
			}
		},
		"id": func(v *yaml.Node, at string) {
			if md.ID = p.str(v, at); md.ID != "" && !idPattern.MatchString(md.ID) {
				p.fail(at, "1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit")
			}
		},
		"labels": func(v *yaml.Node, at string) {
			if v.Kind != yaml.MappingNode || len(v.Content) > 2*64 {
				p.fail(at, "must be a mapping of at most 64 labels")
				return
			}
			md.Labels = map[string]string{}
			for i := 0; i+1 < len(v.Content); i += 2 {
				k := v.Content[i].Value
				if !labelKeyPattern.MatchString(k) {
					p.fail(join(at, k), "a label key is 1 to 63 letters, digits, '.', '_', '/' or '-'")
					continue
				}
				val := p.str(v.Content[i+1], join(at, k))
				if len(val) > 256 || strings.ContainsAny(val, "\n\r") {
					p.fail(join(at, k), "a label value is one line of at most 256 bytes")
				}
				md.Labels[k] = val
			}
		},
	})
	return md
}

// validRepoURL admits https/http, ssh, scp-like and file URLs and absolute
// paths; nothing git could read as an option.
func validRepoURL(u string) bool {
	switch {
	case u == "" || strings.HasPrefix(u, "-") || strings.ContainsAny(u, "\x00\n\r \t"):
		return false
	case strings.HasPrefix(u, "https://"), strings.HasPrefix(u, "http://"), strings.HasPrefix(u, "ssh://"):
		return len(u) > len("ssh://") && !strings.Contains(u, "::")
	case strings.HasPrefix(u, "file:///"):
		return true
	case strings.HasPrefix(u, "/"):
		return true
	}
	return scpLikeURL.MatchString(u)
}

// validRef is a branch name git accepts that cannot be read as an option.
func validRef(b string) bool {
	if b == "" || len(b) > 255 || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") ||
		strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") || strings.Contains(b, "..") || strings.Contains(b, "@{") || strings.Contains(b, "//") {
		return false
	}
	for _, r := range b {
		if r < 0x21 || r == 0x7f || strings.ContainsRune(`~^:?*[\`, r) {
			return false
		}
	}
	return true
}

func validSubpath(s string) bool {
	if s == "" || strings.HasPrefix(s, "/") || strings.ContainsRune(s, 0) {
		return false
	}
	for _, part := range strings.Split(s, "/") {
		if part == ".." {
			return false
		}
	}
	return path.Clean(s) != "."
}

func (p *parser) repository(n *yaml.Node, at string) Repository {
	var r Repository
	p.fields(n, at, map[string]func(*yaml.Node, string){
		"url": func(v *yaml.Node, at string) {
			if r.URL = p.str(v, at); !validRepoURL(r.URL) {
				p.fail(at, "must be an https://, ssh://, git@host:path or file:// URL, or an absolute path")
			}
		},
		"branch": func(v *yaml.Node, at string) {
			if r.Branch = p.str(v, at); !validRef(r.Branch) {
				p.fail(at, "is not a branch name git accepts")
			}
		},
		"commit": func(v *yaml.Node, at string) {
			if r.Commit = p.str(v, at); !commitPattern.MatchString(r.Commit) {
				p.fail(at, "must be a commit id in hex (4 to 64 digits)")
			}
		},
		"subpath": func(v *yaml.Node, at string) {
			if r.Subpath = p.str(v, at); !validSubpath(r.Subpath) {
				p.fail(at, "must be a relative path inside the repository, without ..")
			}
			r.Subpath = path.Clean(r.Subpath)
		},
	})
	if r.URL == "" {
		p.fail(join(at, "url"), "required")
	}
	return r
}

func (p *parser) claude(n *yaml.Node, at string) Claude {
	c := Claude{SkipPermissions: true}
	p.fields(n, at, map[string]func(*yaml.Node, string){
		"prompt": func(v *yaml.Node, at string) { c.Prompt = p.str(v, at) },
		"model": func(v *yaml.Node, at string) {
			if c.Model = p.str(v, at); c.Model == "" || len(c.Model) > 128 || strings.HasPrefix(c.Model, "-") || strings.ContainsAny(c.Model, " \t\n") {
				p.fail(at, "must be a model name like sonnet")
			}
		},
		"max_turns": func(v *yaml.Node, at string) { c.MaxTurns = p.integer(v, at, 1, 10000) },
		"allowed_tools": func(v *yaml.Node, at string) {
			c.AllowedTools = p.strings(v, at, 256)
			for i, tool := range c.AllowedTools {
				if tool == "" || strings.HasPrefix(tool, "-") || strings.ContainsAny(tool, "\n\r") {
					p.fail(fmt.Sprintf("%s[%d]", at, i), "must be a tool name like Read or Bash(go test:*)")
				}
			}
		},
		"skip_permissions": func(v *yaml.Node, at string) { c.SkipPermissions = p.boolean(v, at) },
	})
	if strings.TrimSpace(c.Prompt) == "" {
		p.fail(join(at, "prompt"), "required")
	}
	return c
}

func (p *parser) command(n *yaml.Node, at string) Command {
	var c Command
	p.fields(n, at, map[string]func(*yaml.Node, string){
		"argv": func(v *yaml.Node, at string) { c.Argv = p.strings(v, at, 4096) },
	})
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		p.fail(join(at, "argv"), "required: the program and its arguments")
	}
	return c
}

func (p *parser) environment(n *yaml.Node, at string) Environment {
	var e Environment
	p.fields(n, at, map[string]func(*yaml.Node, string){
		"runtime": func(v *yaml.Node, at string) {
			// Which runtimes exist is the server's catalog: Service.Check.
			if e.Runtime = p.str(v, at); !runtimePattern.MatchString(e.Runtime) {
				p.fail(at, "must be a runtime's name")
			}
		},
		"image": func(v *yaml.Node, at string) {
			if e.Image = p.str(v, at); e.Image == "" || len(e.Image) > 512 || strings.HasPrefix(e.Image, "-") {
				p.fail(at, "must be an image name")
			}
		},
		"cpus": func(v *yaml.Node, at string) {
			f, err := strconv.ParseFloat(v.Value, 64)
			if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") || err != nil || f <= 0 || f > 256 {
				p.fail(at, "must be a number of CPUs above 0, at most 256")
				return
			}
			e.CPUs = f
		},
		"memory": func(v *yaml.Node, at string) { e.MemoryMB = int(p.size(v, at) >> 20) },
		"disk": func(v *yaml.Node, at string) {
			if b := p.size(v, at); b > 0 {
				if b < 1<<30 {
					p.fail(at, "at least 1G")
				}
				e.DiskGB = int(b >> 30)
			}
		},
		"network_mode": func(v *yaml.Node, at string) {
			mode, err := ports.ParseNetworkMode(p.str(v, at))
			if err != nil {
				p.fail(at, "must be one of %s", ports.NetworkModeList(ports.KnownNetworkModes))
			}
			e.NetworkMode = mode
		},
		"allowed_hosts": func(v *yaml.Node, at string) {
			e.AllowedHosts = p.strings(v, at, 256)
			for i, h := range e.AllowedHosts {
				if !hostPattern.MatchString(h) {
					p.fail(fmt.Sprintf("%s[%d]", at, i), "must be a host name, *.suffix, either with an optional :port")
				}
			}
		},
		"isolation": func(v *yaml.Node, at string) {
			if e.Isolation = p.str(v, at); e.Isolation != "" && !runtimePattern.MatchString(e.Isolation) {
				p.fail(at, "must be a tier's name, like %s", ports.TierGVisor)
			}
		},
		"placement": func(v *yaml.Node, at string) { e.Placement = p.placement(v, at) },
	})
	if len(e.AllowedHosts) > 0 && e.NetworkMode != ports.NetworkProxy {
		p.fail(join(at, "allowed_hosts"), "needs network_mode: proxy")
	}
	return e
}

// placement reads {node_selector: {k: v}, tolerations: [{key, operator,
// value, effect}]}, refusing what a scheduler would (ports.Placement.Check).
func (p *parser) placement(n *yaml.Node, at string) ports.Placement {
	var pl ports.Placement
	p.fields(n, at, map[string]func(*yaml.Node, string){
		"node_selector": func(v *yaml.Node, at string) {
			if v.Kind != yaml.MappingNode {
				p.fail(at, "must be a mapping of node labels")
				return
			}
			pl.NodeSelector = map[string]string{}
			for i := 0; i+1 < len(v.Content); i += 2 {
				k := v.Content[i].Value
				if _, dup := pl.NodeSelector[k]; dup {
					p.fail(join(at, k), "given twice")
				}
				pl.NodeSelector[k] = p.str(v.Content[i+1], join(at, k))
			}
		},
		"tolerations": func(v *yaml.Node, at string) {
			if v.Kind != yaml.SequenceNode {
				p.fail(at, "must be a list")
				return
			}
			for i, c := range v.Content {
				var t ports.Toleration
				p.fields(c, fmt.Sprintf("%s[%d]", at, i), map[string]func(*yaml.Node, string){
					"key":      func(v *yaml.Node, at string) { t.Key = p.str(v, at) },
					"operator": func(v *yaml.Node, at string) { t.Operator = p.str(v, at) },
					"value":    func(v *yaml.Node, at string) { t.Value = p.str(v, at) },
					"effect":   func(v *yaml.Node, at string) { t.Effect = p.str(v, at) },
				})
				pl.Tolerations = append(pl.Tolerations, t)
			}
		},
	})
	if err := pl.Check(); err != nil {
		p.fail(at, "%v", err)
	}
	return pl
}

func (p *parser) secrets(n *yaml.Node, at string) []Secret {
	if n.Kind != yaml.SequenceNode || len(n.Content) > 64 {
		p.fail(at, "must be a list of at most 64 secrets")
		return nil
	}
	var out []Secret
	names := map[string]bool{}
	for i, c := range n.Content {
		sat := fmt.Sprintf("%s[%d]", at, i)
		s := Secret{Required: true}
		p.fields(c, sat, map[string]func(*yaml.Node, string){
			"name": func(v *yaml.Node, at string) {
				if s.Name = p.str(v, at); inject.NameProblem(s.Name) != "" {
					p.fail(at, "%s", inject.NameProblem(s.Name))
				}
			},
			"source": func(v *yaml.Node, at string) {
				if s.Source = p.str(v, at); inject.SourceProblem(s.Source) != "" {
					p.fail(at, "%s", inject.SourceProblem(s.Source))
				}
			},
			"key":      func(v *yaml.Node, at string) { s.Key = p.str(v, at) },
			"required": func(v *yaml.Node, at string) { s.Required = p.boolean(v, at) },
			"inject":   func(v *yaml.Node, at string) { s.Inject = p.inject(v, at) },
		})
		if s.Name == "" {
			p.fail(join(sat, "name"), "required")
		} else if names[s.Name] {
			p.fail(join(sat, "name"), "%s given twice", s.Name)
		}
		names[s.Name] = true
		if s.Source == "" {
			p.fail(join(sat, "source"), "required: env or file")
		}
		if s.Key == "" {
			s.Key = s.Name
		}
		if why := inject.KeyProblem(s.Source, s.Key); why != "" {
			p.fail(join(sat, "key"), "%s", why)
		}
		out = append(out, s)
	}
	endpoints := inject.NewEndpoints(slices.Collect(maps.Keys(names)))
	for i, s := range out {
		if s.Inject == nil {
			continue
		}
		if why := endpoints.Problem(s.Name, s.Inject.BaseURLEnv); why != "" {
			p.fail(fmt.Sprintf("%s[%d].inject.base_url_env", at, i), "%s", why)
		}
	}
	return out
}

// inject reads a secret's inject block: {host, header, format?, base_url_env?}.
func (p *parser) inject(n *yaml.Node, at string) *inject.Spec {
	var host, header, format, baseURLEnv string
	p.fields(n, at, map[string]func(*yaml.Node, string){
		"host":         func(v *yaml.Node, at string) { host = p.str(v, at) },
		"header":       func(v *yaml.Node, at string) { header = p.str(v, at) },
		"format":       func(v *yaml.Node, at string) { format = p.str(v, at) },
		"base_url_env": func(v *yaml.Node, at string) { baseURLEnv = p.str(v, at) },
	})
	spec, err := inject.ParseSpec(host, header, format, baseURLEnv)
	if err != nil {
		// The error names the field (inject.host …); keep the path's prefix.
		field, msg, _ := strings.Cut(strings.TrimPrefix(err.Error(), inject.ErrBadSpec.Error()+": "), " ")
		p.fail(strings.TrimSuffix(at, ".inject")+"."+field, "%s", msg)
		return nil
	}
	return &spec
}

func (p *parser) lifecycle(n *yaml.Node, at string, l *Lifecycle) {
	p.fields(n, at, map[string]func(*yaml.Node, string){
		"timeout":      func(v *yaml.Node, at string) { l.Timeout = p.duration(v, at) },
		"idle_timeout": func(v *yaml.Node, at string) { l.IdleTimeout = p.duration(v, at) },
		"failure_action": func(v *yaml.Node, at string) {
			if l.FailureAction = p.str(v, at); l.FailureAction != FailureDestroy && l.FailureAction != FailurePreserve {
				p.fail(at, "must be destroy or preserve")
			}
		},
		"preserve_for": func(v *yaml.Node, at string) { l.PreserveFor = p.duration(v, at) },
		"max_cost_usd": func(v *yaml.Node, at string) {
			f, err := strconv.ParseFloat(v.Value, 64)
			if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") || err != nil || f <= 0 || f > 1e6 {
				p.fail(at, "must be a number of US dollars above 0, at most 1000000")
				return
			}
			l.MaxCostUSD = f
		},
		"artifact_patterns": func(v *yaml.Node, at string) {
			l.ArtifactPatterns = p.strings(v, at, 256)
			for i, pat := range l.ArtifactPatterns {
				if !ValidPattern(pat) {
					p.fail(fmt.Sprintf("%s[%d]", at, i), "must be a relative glob inside the workspace (*, ?, [..], ** for any depth), without ..")
				}
			}
		},
	})
}

// ValidPattern is an artifact pattern: relative, no "..", each part a glob.
func ValidPattern(pat string) bool {
	if pat == "" || len(pat) > 1024 || strings.HasPrefix(pat, "/") || strings.ContainsRune(pat, 0) {
		return false
	}
	for _, part := range strings.Split(pat, "/") {
		if part == ".." || part == "" {
			return false
		}
		if part == "**" {
			continue
		}
		if _, err := path.Match(part, ""); err != nil {
			return false
		}
	}
	return true
}
