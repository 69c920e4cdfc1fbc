package task

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
)

// The contract's example, every field given.
const fullManifest = `
version: "1"
kind: Task
metadata: {name: fix-auth, id: caller-7, labels: {team: core}}
repository:
  url: https://example.com/org/repo.git
  branch: main
  commit: 1a2b3c4d
  subpath: services/api
claude:
  prompt: "fix the login bug"
  model: sonnet
  max_turns: 50
  allowed_tools: ["Read", "Edit", "Bash(go test:*)"]
  skip_permissions: false
environment:
  runtime: docker
  image: agentic-tiny
  cpus: 2
  memory: 2G
  disk: 10G
  network_mode: proxy
  allowed_hosts: [api.anthropic.com, "*.golang.org:443"]
secrets:
  - {name: ANTHROPIC_API_KEY, source: env, key: ANTHROPIC_API_KEY, required: true}
  - {name: TOKEN, source: file, key: tokens/gh}
lifecycle:
  timeout: 2h
  idle_timeout: 20m
  failure_action: preserve
  preserve_for: 3h
  artifact_patterns: ["REPORT.md", "reports/**/*.json"]
`

func TestParseFullManifest(t *testing.T) {
	m, err := Parse([]byte(fullManifest))
	if err != nil {
		t.Fatal(err)
	}
	want := Manifest{
		Version: "1", Kind: "Task",
		Metadata:   Metadata{Name: "fix-auth", ID: "caller-7", Labels: map[string]string{"team": "core"}},
		Repository: &Repository{URL: "https://example.com/org/repo.git", Branch: "main", Commit: "1a2b3c4d", Subpath: "services/api"},
		Claude:     &Claude{Prompt: "fix the login bug", Model: "sonnet", MaxTurns: 50, AllowedTools: []string{"Read", "Edit", "Bash(go test:*)"}},
		Environment: Environment{Runtime: "docker", Image: "agentic-tiny", CPUs: 2, MemoryMB: 2048, DiskGB: 10, NetworkMode: "proxy",
			AllowedHosts: []string{"api.anthropic.com", "*.golang.org:443"}},
		Secrets: []Secret{{Name: "ANTHROPIC_API_KEY", Source: "env", Key: "ANTHROPIC_API_KEY", Required: true}, {Name: "TOKEN", Source: "file", Key: "tokens/gh", Required: true}},
		Lifecycle: Lifecycle{Timeout: 2 * time.Hour, IdleTimeout: 20 * time.Minute, FailureAction: "preserve", PreserveFor: 3 * time.Hour,
			ArtifactPatterns: []string{"REPORT.md", "reports/**/*.json"}},
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", m, want)
	}
}

func TestParseDefaultsAndOldNames(t *testing.T) {
	m, err := Parse([]byte(`{"command": {"argv": ["make", "test"]}, "vm": {"runtime": "host"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Environment.Runtime != "host" || m.Lifecycle.Timeout != DefaultTimeout || m.Lifecycle.FailureAction != FailureDestroy ||
		m.Lifecycle.PreserveFor != DefaultPreserveFor || m.Command == nil || m.Claude != nil {
		t.Errorf("defaults: %+v", m)
	}
	c, err := Parse([]byte("claude: {prompt: hi}"))
	if err != nil || !c.Claude.SkipPermissions {
		t.Errorf("skip_permissions defaults to true: %+v %v", c.Claude, err)
	}
}

// Every refusal names the field's path.
func TestParseRefusals(t *testing.T) {
	for _, c := range []struct{ doc, path string }{
		{`claude: {prompt: x}` + "\nbogus: 1", "bogus: unknown field"},
		{`claude: {prompt: x, temperature: 1}`, "claude.temperature: unknown field"},
		{`{}`, "claude: give claude"},
		{`{claude: {prompt: x}, command: {argv: [a]}}`, "command: give claude or command, not both"},
		{`claude: {prompt: ""}`, "claude.prompt: required"},
		{`command: {argv: []}`, "command.argv: required"},
		{`{version: "2", claude: {prompt: x}}`, "version: must be"},
		{`{kind: Job, claude: {prompt: x}}`, "kind: must be Task"},
		{`{claude: {prompt: x}, environment: {memory: 2048}}`, "environment.memory: must be a size with a unit"},
		{`{claude: {prompt: x}, environment: {memory: 2X}}`, "environment.memory"},
		{`{claude: {prompt: x}, environment: {cpus: many}}`, "environment.cpus"},
		{`{claude: {prompt: x}, environment: {cpus: 0}}`, "environment.cpus"},
		{`{claude: {prompt: x}, environment: {runtime: "--firecracker"}}`, "environment.runtime: must be a runtime's name"},
		{`{claude: {prompt: x}, environment: {network_mode: open}}`, "environment.network_mode"},
		{`{claude: {prompt: x}, environment: {allowed_hosts: [a.com]}}`, "environment.allowed_hosts: needs network_mode: proxy"},
		{`{claude: {prompt: x}, environment: {network_mode: proxy, allowed_hosts: ["http://a.com"]}}`, "environment.allowed_hosts[0]"},
		{`{claude: {prompt: x}, environment: {runtime: host}, vm: {runtime: host}}`, "vm: environment and vm are one block"},
		{`{claude: {prompt: x}, repository: {branch: main}}`, "repository.url: required"},
		{`{claude: {prompt: x}, repository: {url: "--upload-pack=evil"}}`, "repository.url"},
		{`{claude: {prompt: x}, repository: {url: "relative/path"}}`, "repository.url"},
		{`{claude: {prompt: x}, repository: {url: /r, branch: "-x"}}`, "repository.branch"},
		{`{claude: {prompt: x}, repository: {url: /r, branch: "a..b"}}`, "repository.branch"},
		{`{claude: {prompt: x}, repository: {url: /r, commit: "HEAD~1"}}`, "repository.commit"},
		{`{claude: {prompt: x}, repository: {url: /r, subpath: "../up"}}`, "repository.subpath"},
		{`{claude: {prompt: x}, repository: {url: /r, subpath: "/abs"}}`, "repository.subpath"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: vault}]}`, "secrets[0].source: vault is not a source"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: env, inject: {header: x-api-key}}]}`, "secrets[0].inject.host"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: env, inject: {host: "*.a.com", header: x-api-key}}]}`, "secrets[0].inject.host"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: env, inject: {host: api.anthropic.com, header: Host}}]}`, "secrets[0].inject.header"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: env, inject: {host: api.anthropic.com, header: x, format: nope}}]}`, "secrets[0].inject.format"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: env, inject: {host: example.com, header: x}}]}`, "secrets[0].inject.base_url_env"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: env, inject: {host: api.anthropic.com, header: x, proxy: y}}]}`, "secrets[0].inject.proxy: unknown field"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: env, inject: {host: api.anthropic.com, header: x}}, {name: L, source: env, inject: {host: api.anthropic.com, header: y}}]}`, "secrets[1].inject.base_url_env: ANTHROPIC_BASE_URL already names the endpoint of K"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: env, inject: {host: a.com, header: x, base_url_env: L}}, {name: L, source: env}]}`, "secrets[0].inject.base_url_env: L is a secret's name"},
		{`{claude: {prompt: x}, lifecycle: {max_cost_usd: 0}}`, "lifecycle.max_cost_usd"},
		{`{claude: {prompt: x}, lifecycle: {max_cost_usd: "5"}}`, "lifecycle.max_cost_usd"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: http}]}`, "secrets[0].source: must be env or file"},
		{`{claude: {prompt: x}, secrets: [{name: "K-1", source: env}]}`, "secrets[0].name"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: file, key: ../../etc/shadow}]}`, "secrets[0].key"},
		{`{claude: {prompt: x}, secrets: [{name: K, source: env}, {name: K, source: env}]}`, "secrets[1].name: K given twice"},
		{`{claude: {prompt: x}, lifecycle: {timeout: forever}}`, "lifecycle.timeout"},
		{`{claude: {prompt: x}, lifecycle: {timeout: -1s}}`, "lifecycle.timeout"},
		{`{claude: {prompt: x}, lifecycle: {failure_action: keep}}`, "lifecycle.failure_action"},
		{`{claude: {prompt: x}, lifecycle: {artifact_patterns: ["../x"]}}`, "lifecycle.artifact_patterns[0]"},
		{`{claude: {prompt: x}, lifecycle: {artifact_patterns: ["/etc/passwd"]}}`, "lifecycle.artifact_patterns[0]"},
		{`{claude: {prompt: x}, lifecycle: {artifact_patterns: ["a/[b"]}}`, "lifecycle.artifact_patterns[0]"},
		{`{claude: {prompt: x, max_turns: 0}}`, "claude.max_turns"},
		{`{claude: {prompt: x, max_turns: "5"}}`, "claude.max_turns: must be an integer"},
		{`{claude: {prompt: x, skip_permissions: "yes"}}`, "claude.skip_permissions"},
		{`{claude: {prompt: x, model: "--evil"}}`, "claude.model"},
		{`{claude: {prompt: x}, metadata: {name: "a b"}}`, "metadata.name"},
		{`{claude: {prompt: x}, metadata: {labels: {"": x}}}`, "metadata.labels."},
		{`{claude: {prompt: x}, claude: {prompt: y}}`, ""},
		{`[1, 2]`, "must be a mapping"},
		{`claude: {prompt: x}` + "\n---\nclaude: {prompt: y}", ""},
		{"\t", "not YAML"},
	} {
		_, err := Parse([]byte(c.doc))
		if !errors.Is(err, ErrInvalidManifest) {
			t.Errorf("%s: %v, want ErrInvalidManifest", c.doc, err)
			continue
		}
		if !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: %q does not say %q", c.doc, err, c.path)
		}
	}
}

func TestParseInjectedSecret(t *testing.T) {
	m, err := Parse([]byte(`{claude: {prompt: x}, lifecycle: {max_cost_usd: 2.5}, secrets: [
  {name: ANTHROPIC_API_KEY, source: env, inject: {host: api.anthropic.com, header: x-api-key}},
  {name: GH_TOKEN, source: file, key: gh, inject: {host: api.github.com, header: "Authorization: token {}", base_url_env: GH_API}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Secret{
		{Name: "ANTHROPIC_API_KEY", Source: "env", Key: "ANTHROPIC_API_KEY", Required: true,
			Inject: &inject.Spec{Host: "api.anthropic.com", Port: 443, Header: "X-Api-Key", Format: "{}", BaseURLEnv: "ANTHROPIC_BASE_URL"}},
		{Name: "GH_TOKEN", Source: "file", Key: "gh", Required: true,
			Inject: &inject.Spec{Host: "api.github.com", Port: 443, Header: "Authorization", Format: "token {}", BaseURLEnv: "GH_API"}},
	}
	if !reflect.DeepEqual(m.Secrets, want) || m.Lifecycle.MaxCostUSD != 2.5 {
		t.Fatalf("%+v %v", m.Secrets, m.Lifecycle.MaxCostUSD)
	}
}

func TestSizes(t *testing.T) {
	for in, mib := range map[string]int{"512M": 512, "2G": 2048, "1.5Gi": 1536, "2GB": 2048, "1T": 1 << 20, "1024K": 1} {
		m, err := Parse([]byte(`{claude: {prompt: x}, environment: {memory: "` + in + `"}}`))
		if err != nil || m.Environment.MemoryMB != mib {
			t.Errorf("%s: %d MiB, %v; want %d", in, m.Environment.MemoryMB, err, mib)
		}
	}
	for _, bad := range []string{"512", "0G", "1K", "100T", "-1G", "G", "2 Gigs"} {
		if _, err := Parse([]byte(`{claude: {prompt: x}, environment: {memory: "` + bad + `"}}`)); err == nil {
			t.Errorf("memory %q accepted", bad)
		}
	}
}

func TestRepositoryURLs(t *testing.T) {
	for _, u := range []string{"https://github.com/a/b.git", "ssh://git@host/a/b", "git@github.com:a/b.git", "file:///srv/repo", "/srv/repo"} {
		if !validRepoURL(u) {
			t.Errorf("%s refused", u)
		}
	}
	for _, u := range []string{"", "-oProxyCommand=x", "ftp://x/y", "repo", "ext::sh -c x", "https://a b", "file://host/x"} {
		if validRepoURL(u) {
			t.Errorf("%s accepted", u)
		}
	}
}

// FuzzParse: any input is a manifest or ErrInvalidManifest, never a panic;
// what is accepted holds the rules.
func FuzzParse(f *testing.F) {
	f.Add([]byte(fullManifest))
	f.Add([]byte(`{"command": {"argv": ["true"]}}`))
	f.Add([]byte(`claude: {prompt: x}`))
	f.Add([]byte(`{claude: {prompt: x}, environment: {memory: 2G, cpus: 1.5}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		m, err := Parse(doc)
		if err != nil {
			if !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("error %v is not ErrInvalidManifest", err)
			}
			return
		}
		if (m.Claude == nil) == (m.Command == nil) {
			t.Fatalf("accepted without exactly one of claude and command: %+v", m)
		}
		if m.Repository != nil && !validRepoURL(m.Repository.URL) {
			t.Fatalf("accepted repository url %q", m.Repository.URL)
		}
		for _, p := range m.Lifecycle.ArtifactPatterns {
			if !ValidPattern(p) {
				t.Fatalf("accepted pattern %q", p)
			}
		}
		if m.Lifecycle.Timeout <= 0 {
			t.Fatalf("accepted timeout %v", m.Lifecycle.Timeout)
		}
	})
}
