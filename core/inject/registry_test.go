package inject

import (
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"
)

func registered(t *testing.T, r *Registry, env string, limits Limits) Grant {
	t.Helper()
	spec, err := ParseSpec("api.anthropic.com", "x-api-key", "", "")
	if err != nil {
		t.Fatal(err)
	}
	g, err := r.Register(env, []Secret{{Name: "ANTHROPIC_API_KEY", Spec: spec, Value: "sk-real-" + env}}, limits, func(b []byte) error { _, err := rand.Read(b); return err })
	if err != nil || len(g) != 1 {
		t.Fatal(g, err)
	}
	return g[0]
}

func withKey(ph string) Request {
	return Request{Path: "/v1/messages", Header: map[string][]string{"X-Api-Key": {ph}}}
}

func TestRegistryAuthorize(t *testing.T) {
	r := NewRegistry(nil)
	now := time.Unix(1e9, 0)
	a := registered(t, r, "env-a", Limits{})
	b := registered(t, r, "env-b", Limits{})
	if a.Placeholder == b.Placeholder || !IsPlaceholder(a.Placeholder) || a.BaseURLEnv != "ANTHROPIC_BASE_URL" {
		t.Fatalf("grants %+v %+v", a, b)
	}
	got, ref := r.Authorize("env-a", "ANTHROPIC_API_KEY", withKey(a.Placeholder), now)
	if ref != nil || got.HeaderValue != "sk-real-env-a" || got.Spec.Header != "X-Api-Key" {
		t.Fatalf("own placeholder: %+v %v", got, ref)
	}
	for name, c := range map[string]struct {
		env, secret string
		req         Request
		code        string
	}{
		"another environment's placeholder": {"env-a", "ANTHROPIC_API_KEY", withKey(b.Placeholder), CodeForeign},
		"from an environment without it":    {"env-c", "ANTHROPIC_API_KEY", withKey(a.Placeholder), CodeForeign},
		"an unknown secret":                 {"env-a", "GITHUB_TOKEN", withKey(a.Placeholder), CodeUnknownSecret},
		"placeholder in the body":           {"env-a", "ANTHROPIC_API_KEY", Request{Header: withKey(a.Placeholder).Header, Body: []byte(a.Placeholder)}, CodeMisplaced},
		"no placeholder":                    {"env-a", "ANTHROPIC_API_KEY", Request{}, CodeNoPlaceholder},
	} {
		_, ref := r.Authorize(c.env, c.secret, c.req, now)
		if ref == nil || ref.Code != c.code {
			t.Errorf("%s: %v, want %s", name, ref, c.code)
		}
		if ref != nil && (strings.Contains(ref.Reason, "sk-real") || strings.Contains(ref.Reason, a.Placeholder)) {
			t.Errorf("%s: the refusal tells a secret: %s", name, ref.Reason)
		}
	}
	// After removal the placeholder is refused as gone, from anywhere.
	r.Forget("env-a")
	for _, env := range []string{"env-a", "env-b"} {
		if _, ref := r.Authorize(env, "ANTHROPIC_API_KEY", withKey(a.Placeholder), now); ref == nil || ref.Code != CodeGone {
			t.Errorf("after Forget, from %s: %v", env, ref)
		}
	}
	if r.Names("env-a") != nil || len(r.Names("env-b")) != 1 {
		t.Fatal("Names")
	}
	// Registering again replaces: the old placeholder is gone.
	b2 := registered(t, r, "env-b", Limits{})
	if _, ref := r.Authorize("env-b", "ANTHROPIC_API_KEY", withKey(b.Placeholder), now); ref == nil || ref.Code != CodeGone {
		t.Errorf("a replaced placeholder: %v", ref)
	}
	if _, ref := r.Authorize("env-b", "ANTHROPIC_API_KEY", withKey(b2.Placeholder), now); ref != nil {
		t.Errorf("the new placeholder: %v", ref)
	}
}

func TestRegistryDuplicateAndRandomFailure(t *testing.T) {
	r := NewRegistry(nil)
	spec, _ := ParseSpec("api.anthropic.com", "x-api-key", "", "")
	if _, err := r.Register("e", []Secret{{Name: "K", Spec: spec}, {Name: "K", Spec: spec}}, Limits{}, func(b []byte) error { return nil }); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("duplicate: %v", err)
	}
	boom := errors.New("no randomness")
	if _, err := r.Register("e", []Secret{{Name: "K", Spec: spec}}, Limits{}, func([]byte) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("random failure: %v", err)
	}
	if r.Names("e") != nil {
		t.Fatal("a failed Register kept secrets")
	}
}

func TestRegistryBudget(t *testing.T) {
	r := NewRegistry(nil)
	now := time.Unix(1e9, 0)
	g := registered(t, r, "e", Limits{MaxCostUSD: 0.01})
	// 1000 output tokens of Sonnet: $0.015, over the budget.
	r.Record("e", Response{Model: "claude-sonnet-4-5", InputTokens: 10, OutputTokens: 1000})
	u, over := r.Usage("e")
	if !over || u.Requests != 1 || u.OutputTokens != 1000 {
		t.Fatalf("usage %+v over %v", u, over)
	}
	if _, ref := r.Authorize("e", "ANTHROPIC_API_KEY", withKey(g.Placeholder), now); ref == nil || ref.Code != CodeBudget {
		t.Fatalf("over budget: %v", ref)
	}
	r.CountRequest("e")
	if u, _ := r.Usage("e"); u.Requests != 2 {
		t.Fatalf("CountRequest: %+v", u)
	}
	r.AddBytes("e", 100, 2000)
	r.AddBytes("e", 1, 20)
	if u, _ := r.Usage("e"); u.BytesSent != 101 || u.BytesReceived != 2020 || u.Requests != 2 {
		t.Fatalf("AddBytes: %+v", u)
	}
	// Unknown environments have no usage and do not panic.
	r.Record("nope", Response{})
	r.CountRequest("nope")
	r.AddBytes("nope", 1, 1)
	if u, over := r.Usage("nope"); u != (Usage{}) || over {
		t.Fatal("usage of an unknown environment")
	}
}

func TestRegistryRate(t *testing.T) {
	r := NewRegistry(nil)
	now := time.Unix(1e9, 0)
	g := registered(t, r, "e", Limits{PerMinute: 3})
	for i := 0; i < 3; i++ {
		if _, ref := r.Authorize("e", "ANTHROPIC_API_KEY", withKey(g.Placeholder), now); ref != nil {
			t.Fatalf("request %d: %v", i, ref)
		}
	}
	if _, ref := r.Authorize("e", "ANTHROPIC_API_KEY", withKey(g.Placeholder), now); ref == nil || ref.Code != CodeRate {
		t.Fatalf("fourth request: %v", ref)
	}
	// 20 s later one request's worth has come back.
	if _, ref := r.Authorize("e", "ANTHROPIC_API_KEY", withKey(g.Placeholder), now.Add(20*time.Second)); ref != nil {
		t.Fatalf("after 20s: %v", ref)
	}
	if _, ref := r.Authorize("e", "ANTHROPIC_API_KEY", withKey(g.Placeholder), now.Add(20*time.Second)); ref == nil {
		t.Fatal("the bucket refilled too much")
	}
}

func TestPlaceholdersIn(t *testing.T) {
	a := NewPlaceholder(make([]byte, PlaceholderBytes))
	b := NewPlaceholder([]byte("abcdefghijklmnopqrstuvwx"))
	got := placeholdersIn("Bearer " + a + "," + PlaceholderPrefix + "zz " + b + PlaceholderPrefix)
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("%q", got)
	}
	if r := Redact("/v1/" + a + "?k=" + b); strings.Contains(r, a) || strings.Contains(r, b) || !strings.HasPrefix(r, "/v1/"+PlaceholderPrefix) {
		t.Fatalf("Redact: %q", r)
	}
}

func TestRegistryRestoreKeepsPlaceholdersAndUsage(t *testing.T) {
	r := NewRegistry(nil)
	now := time.Unix(1e9, 0)
	g := registered(t, r, "e", Limits{})
	r.Record("e", Response{Model: "claude-haiku-4-5", InputTokens: 7})
	r.AddBytes("e", 3, 5)
	used, _ := r.Usage("e")
	// A new server: the same placeholder works again, with the usage so far.
	r2 := NewRegistry(nil)
	spec, _ := ParseSpec("api.anthropic.com", "x-api-key", "", "")
	secrets := []Secret{{Name: "ANTHROPIC_API_KEY", Spec: spec, Value: "sk-real-e"}}
	grants, err := r2.Restore("e", secrets, map[string]string{"ANTHROPIC_API_KEY": g.Placeholder}, Limits{}, used)
	if err != nil || grants[0] != g {
		t.Fatalf("%+v %v", grants, err)
	}
	if _, ref := r2.Authorize("e", "ANTHROPIC_API_KEY", withKey(g.Placeholder), now); ref != nil {
		t.Fatal(ref)
	}
	if u, _ := r2.Usage("e"); u.InputTokens != 7 || u.BytesSent != 3 || u.BytesReceived != 5 {
		t.Fatalf("usage %+v", u)
	}
	for name, phs := range map[string]map[string]string{
		"none":      {},
		"not one":   {"ANTHROPIC_API_KEY": "sk-123"},
		"another's": {"ANTHROPIC_API_KEY": g.Placeholder},
	} {
		env := "other"
		if _, err := r2.Restore(env, secrets, phs, Limits{}, Usage{}); !errors.Is(err, ErrBadPlaceholder) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
