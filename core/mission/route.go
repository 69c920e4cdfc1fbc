package mission

import (
	"errors"
	"slices"
	"sort"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Routing errors; the REST adapter maps them to 404 and 503.
var (
	ErrAgentNotConnected = errors.New("the requested agent is not connected")
	ErrNoAgent           = errors.New("no connected agent can take the mission")
)

// Candidate is an agent as routing sees it.
type Candidate struct {
	ID           string
	Status       ports.AgentStatus
	Runtime      ports.RuntimeKind
	Arch         string
	Capabilities []string // tools the agent found, e.g. "claude", "tmux"
	Load         int
	// Asleep: the agent is away because its environment is hibernated (or
	// on its way in or out), and work sent to it wakes it first.
	Asleep bool
}

// accepting reports whether an agent can take new work: connected and
// heartbeating (a busy agent can run more than one mission).
func accepting(c Candidate) bool { return c.Status.Working() }

// AgentCapabilities is what a mission can ask of an agent, in the contract's vocabulary.
func AgentCapabilities(c Candidate) []string {
	caps := []string{"resumable", "hitl", "platform:linux/" + PlatformArch(c.Arch)}
	if c.Runtime.Valid() {
		caps = append(caps, "isolation:"+string(c.Runtime))
	}
	if slices.Contains(c.Capabilities, "claude") {
		caps = append(caps, "runtime:claude-code")
	}
	return caps
}

// PlatformArch names a Go architecture the way aiwg does (Node's process.arch).
func PlatformArch(goarch string) string {
	switch goarch {
	case "amd64", "":
		return "x64"
	case "386":
		return "ia32"
	default:
		return goarch
	}
}

// wakeable reports whether an agent that cannot take work now will once
// its environment is woken (which the mission's launch does).
func wakeable(c Candidate) bool { return c.Asleep && !accepting(c) }

// Route picks the agent for a mission: the named agent if the filter names
// one and it can take work or is asleep (ErrAgentNotConnected otherwise),
// else an accepting agent that has every requested capability, least loaded
// first, then by id. A sleeping agent is taken without being named only
// when no awake one fits: waking costs the mission a restore, and an awake
// agent that is busy is still the cheaper place.
func Route(f ports.MissionFilter, agents []Candidate) (string, error) {
	if f.AgentID != "" {
		for _, c := range agents {
			if c.ID == f.AgentID && (accepting(c) || wakeable(c)) {
				return c.ID, nil
			}
		}
		return "", ErrAgentNotConnected
	}
	fit := fitting(f, agents, accepting)
	if len(fit) == 0 {
		fit = fitting(f, agents, wakeable)
	}
	if len(fit) == 0 {
		return "", ErrNoAgent
	}
	sort.SliceStable(fit, func(i, j int) bool {
		if fit[i].Load != fit[j].Load {
			return fit[i].Load < fit[j].Load
		}
		return fit[i].ID < fit[j].ID
	})
	return fit[0].ID, nil
}

// fitting are the agents that pass and have every capability f asks for.
func fitting(f ports.MissionFilter, agents []Candidate, pass func(Candidate) bool) []Candidate {
	var fit []Candidate
	for _, c := range agents {
		if !pass(c) {
			continue
		}
		have := AgentCapabilities(c)
		ok := true
		for _, want := range f.Capabilities {
			if !slices.Contains(have, want) {
				ok = false
				break
			}
		}
		if ok {
			fit = append(fit, c)
		}
	}
	return fit
}

func sortByCreation(ms []ports.Mission) {
	sort.SliceStable(ms, func(i, j int) bool {
		if !ms[i].CreatedAt.Equal(ms[j].CreatedAt) {
			return ms[i].CreatedAt.Before(ms[j].CreatedAt)
		}
		return ms[i].ID < ms[j].ID
	})
}

// ExecutorCapabilities is what the executor advertises to aiwg serve, honestly:
// platform, resumable and hitl always; an isolation tier only when a runtime of
// that kind is configured and reachable (isolations: "host" for the host
// supervisor, "container", "vm") or has a connected agent;
// runtime:claude-code only when claude is on the host or an agent reports it
// (a connected one, or one asleep: a mission wakes it).
func ExecutorCapabilities(goarch string, isolations []ports.RuntimeKind, claudeOnHost bool, agents []Candidate) []string {
	set := map[string]bool{"platform:linux/" + PlatformArch(goarch): true, "resumable": true, "hitl": true}
	for _, iso := range isolations {
		set["isolation:"+string(iso)] = true
	}
	if claudeOnHost {
		set["runtime:claude-code"] = true
	}
	for _, a := range agents {
		if a.Status == ports.AgentDisconnected && !a.Asleep {
			continue
		}
		for _, c := range AgentCapabilities(a) {
			if !strings.HasPrefix(c, "platform:") {
				set[c] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}
