package portsfake

import (
	"slices"
	"strings"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Directory is a fake ports.AgentDirectory: the agents the test says are
// there, listed by id.
type Directory struct {
	mu     sync.Mutex
	agents map[string]ports.AgentInfo
}

var _ ports.AgentDirectory = (*Directory)(nil)

// NewDirectory returns a directory listing agents.
func NewDirectory(agents ...ports.AgentInfo) *Directory {
	d := &Directory{agents: map[string]ports.AgentInfo{}}
	d.Set(agents...)
	return d
}

// Agents implements ports.AgentDirectory.
func (d *Directory) Agents() []ports.AgentInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]ports.AgentInfo, 0, len(d.agents))
	for _, a := range d.agents {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b ports.AgentInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Agent implements ports.AgentDirectory.
func (d *Directory) Agent(id string) (ports.AgentInfo, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.agents[id]
	return a, ok
}

// Add lists a, replacing the agent of the same id.
func (d *Directory) Add(a ports.AgentInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.agents[a.ID] = a
}

// Set replaces every agent listed by agents.
func (d *Directory) Set(agents ...ports.AgentInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.agents)
	for _, a := range agents {
		d.agents[a.ID] = a
	}
}

// SetStatus sets the status of agent id, listing it if it was not.
func (d *Directory) SetStatus(id string, st ports.AgentStatus) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.agents[id]
	a.ID, a.Status = id, st
	d.agents[id] = a
}

// Remove stops listing agent id.
func (d *Directory) Remove(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.agents, id)
}
