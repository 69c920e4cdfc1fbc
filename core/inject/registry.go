package inject

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Secret is one injected secret of an environment: its variable's name,
// where it goes, and the real value (kept in memory only).
type Secret struct {
	Name  string
	Spec  Spec
	Value string
}

// Grant is what the workload is given for a Secret: the placeholder its
// variable holds, and the variable that names the local endpoint.
type Grant struct {
	Name, Placeholder, BaseURLEnv string
}

// Limits bound what an environment's workload may send through the
// injecting path.
type Limits struct {
	// MaxCostUSD stops model requests once the environment's usage costs
	// that much (0: no budget).
	MaxCostUSD float64
	// PerMinute is how many requests may start per minute (burst of the
	// same size); 0 means DefaultPerMinute.
	PerMinute int
}

// DefaultPerMinute is the request rate an environment gets unless told.
const DefaultPerMinute = 600

// Registry keeps the injected secrets of live environments and what their
// requests used. In memory only: a restart of the server forgets every
// value, and the environments' placeholders stop working (their tasks
// are re-staged as the task use case decides).
type Registry struct {
	prices Prices

	mu            sync.Mutex
	envs          map[string]*envSecrets
	byPlaceholder map[string]placeholderOwner
	// gone remembers placeholders of removed environments, so a replay
	// is told why it fails (bounded: the oldest are dropped).
	gone      map[string]string
	goneOrder []string
}

type envSecrets struct {
	secrets map[string]*Secret // by name
	grants  map[string]string  // name → placeholder
	limits  Limits
	usage   Usage
	tokens  float64
	last    time.Time
}

type placeholderOwner struct{ env, name string }

const maxGone = 4096

// NewRegistry keeps secrets priced at prices (nil: DefaultPrices).
func NewRegistry(prices Prices) *Registry {
	if prices == nil {
		prices = DefaultPrices
	}
	return &Registry{prices: prices, envs: map[string]*envSecrets{}, byPlaceholder: map[string]placeholderOwner{}, gone: map[string]string{}}
}

// ErrDuplicate is a secret name given twice to Register.
var ErrDuplicate = errors.New("inject: secret given twice")

// Register keeps env's secrets (replacing any it had: their placeholders
// stop working) and returns the grants to put in the workload's
// environment. random fills a placeholder's bytes.
func (r *Registry) Register(env string, secrets []Secret, limits Limits, random func([]byte) error) ([]Grant, error) {
	placeholders := make(map[string]string, len(secrets))
	for _, s := range secrets {
		b := make([]byte, PlaceholderBytes)
		if err := random(b); err != nil {
			return nil, err
		}
		placeholders[s.Name] = NewPlaceholder(b)
	}
	return r.Restore(env, secrets, placeholders, limits, Usage{})
}

// ErrBadPlaceholder is a placeholder Restore was given that is not one, or
// that another environment holds.
var ErrBadPlaceholder = errors.New("inject: not a placeholder of this environment")

// Restore keeps env's secrets under the placeholders it was given before
// (the server restarted while the workload holds them), with the usage
// counted so far.
func (r *Registry) Restore(env string, secrets []Secret, placeholders map[string]string, limits Limits, used Usage) ([]Grant, error) {
	es := &envSecrets{secrets: map[string]*Secret{}, grants: map[string]string{}, limits: limits, usage: used}
	grants := make([]Grant, 0, len(secrets))
	for i := range secrets {
		s := secrets[i]
		if _, dup := es.secrets[s.Name]; dup {
			return nil, fmt.Errorf("%w: %s", ErrDuplicate, s.Name)
		}
		ph := placeholders[s.Name]
		if !IsPlaceholder(ph) {
			return nil, fmt.Errorf("%w: %s", ErrBadPlaceholder, s.Name)
		}
		es.secrets[s.Name] = &s
		es.grants[s.Name] = ph
		grants = append(grants, Grant{Name: s.Name, Placeholder: ph, BaseURLEnv: s.Spec.BaseURLEnv})
	}
	if es.limits.PerMinute <= 0 {
		es.limits.PerMinute = DefaultPerMinute
	}
	es.tokens = float64(es.limits.PerMinute)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ph := range es.grants {
		if o, ok := r.byPlaceholder[ph]; ok && o.env != env {
			return nil, fmt.Errorf("%w: %s", ErrBadPlaceholder, o.name)
		}
	}
	r.forgetLocked(env)
	for _, ph := range es.grants {
		delete(r.gone, ph) // a restored placeholder is live again
	}
	r.envs[env] = es
	for name, ph := range es.grants {
		r.byPlaceholder[ph] = placeholderOwner{env: env, name: name}
	}
	return grants, nil
}

// Forget drops env's secrets: their placeholders fail from now on.
func (r *Registry) Forget(env string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(env)
}

func (r *Registry) forgetLocked(env string) {
	es := r.envs[env]
	if es == nil {
		return
	}
	for _, ph := range es.grants {
		delete(r.byPlaceholder, ph)
		r.gone[ph] = env
		r.goneOrder = append(r.goneOrder, ph)
	}
	for len(r.goneOrder) > maxGone {
		delete(r.gone, r.goneOrder[0])
		r.goneOrder = r.goneOrder[1:]
	}
	delete(r.envs, env)
}

// Names lists env's injected secrets' names (none: nil).
func (r *Registry) Names(env string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	es := r.envs[env]
	if es == nil {
		return nil
	}
	out := make([]string, 0, len(es.secrets))
	for n := range es.secrets {
		out = append(out, n)
	}
	return out
}

// Authorized is what a request that passed Authorize goes out with.
type Authorized struct {
	Spec Spec
	// HeaderValue replaces the request's Spec.Header.
	HeaderValue string
}

// Refusal codes of Authorize, beside Check's.
const (
	CodeUnknownSecret = "secret_unknown"
	CodeForeign       = "placeholder_foreign"
	CodeGone          = "placeholder_gone"
	CodeBudget        = "budget_exhausted"
	CodeRate          = "rate_limited"
)

// Authorize decides whether env's workload may send req with the secret
// name put in, at now; a refusal's Code says which rule refused it.
func (r *Registry) Authorize(env, name string, req Request, now time.Time) (Authorized, *Refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	es := r.envs[env]
	var s *Secret
	if es != nil {
		s = es.secrets[name]
	}
	if s == nil {
		if ref := r.foreignLocked(env, req); ref != nil {
			return Authorized{}, ref
		}
		return Authorized{}, &Refusal{Code: CodeUnknownSecret, Reason: fmt.Sprintf("this environment has no injected secret %q", name)}
	}
	ph := es.grants[name]
	if ref := Check(s.Spec, ph, req); ref != nil {
		if ref.Code == CodeNoPlaceholder {
			if f := r.foreignLocked(env, req); f != nil {
				return Authorized{}, f
			}
		}
		return Authorized{}, ref
	}
	if OverBudget(es.usage.CostUSD, es.limits.MaxCostUSD) {
		return Authorized{}, &Refusal{Code: CodeBudget, Reason: fmt.Sprintf("the budget of $%.2f is spent ($%.4f used)", es.limits.MaxCostUSD, es.usage.CostUSD)}
	}
	if !es.take(now) {
		return Authorized{}, &Refusal{Code: CodeRate, Reason: fmt.Sprintf("more than %d requests a minute", es.limits.PerMinute)}
	}
	return Authorized{Spec: s.Spec, HeaderValue: s.Spec.Value(s.Value)}, nil
}

// take spends one request of the environment's token bucket.
func (es *envSecrets) take(now time.Time) bool {
	per := float64(es.limits.PerMinute)
	if !es.last.IsZero() && now.After(es.last) {
		es.tokens += now.Sub(es.last).Minutes() * per
		if es.tokens > per {
			es.tokens = per
		}
	}
	es.last = now
	if es.tokens < 1 {
		return false
	}
	es.tokens--
	return true
}

// foreignLocked tells a request carrying another environment's (or a
// removed environment's) placeholder why it fails.
func (r *Registry) foreignLocked(env string, req Request) *Refusal {
	for _, values := range req.Header {
		for _, v := range values {
			for _, ph := range placeholdersIn(v) {
				if o, ok := r.byPlaceholder[ph]; ok && o.env != env {
					return &Refusal{Code: CodeForeign, Reason: "the placeholder belongs to another environment"}
				}
				if _, ok := r.gone[ph]; ok {
					return &Refusal{Code: CodeGone, Reason: "the placeholder belongs to an environment that is gone"}
				}
			}
		}
	}
	return nil
}

// placeholdersIn finds every placeholder-shaped word in s.
func placeholdersIn(s string) []string {
	var out []string
	for {
		i := strings.Index(s, PlaceholderPrefix)
		if i < 0 {
			return out
		}
		s = s[i:]
		end := len(PlaceholderPrefix) + 2*PlaceholderBytes
		if len(s) >= end && IsPlaceholder(s[:end]) {
			out = append(out, s[:end])
			s = s[end:]
			continue
		}
		s = s[len(PlaceholderPrefix):]
	}
}

// Redact replaces every placeholder in s (a logged path, say) with its
// prefix alone.
func Redact(s string) string {
	for _, ph := range placeholdersIn(s) {
		s = strings.ReplaceAll(s, ph, PlaceholderPrefix+"…")
	}
	return s
}

// Record adds one response's usage to env's.
func (r *Registry) Record(env string, resp Response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if es := r.envs[env]; es != nil {
		es.usage = es.usage.Add(resp, r.prices)
	}
}

// CountRequest adds a request that carried no model usage (another API,
// or an error) to env's count.
func (r *Registry) CountRequest(env string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if es := r.envs[env]; es != nil {
		es.usage.Requests++
	}
}

// AddBytes adds a request's body bytes, sent and received, to env's.
func (r *Registry) AddBytes(env string, sent, received int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if es := r.envs[env]; es != nil {
		es.usage.BytesSent += sent
		es.usage.BytesReceived += received
	}
}

// Usage is what env's requests used so far, and whether its budget is spent.
func (r *Registry) Usage(env string) (u Usage, overBudget bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	es := r.envs[env]
	if es == nil {
		return Usage{}, false
	}
	return es.usage, OverBudget(es.usage.CostUSD, es.limits.MaxCostUSD)
}
