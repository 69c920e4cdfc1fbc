package ports

import "time"

// MaxListeningPorts is the most listening ports an agent reports and the
// server keeps for one agent; an agent with more reports the lowest ones
// and says the list is truncated.
const MaxListeningPorts = 256

// MaxProcessNameBytes bounds a listening port's process name (a Linux
// comm is at most 15 bytes).
const MaxProcessNameBytes = 64

// AddressFamily is the IP version of a listening socket.
type AddressFamily string

const (
	FamilyIPv4 AddressFamily = "ipv4"
	FamilyIPv6 AddressFamily = "ipv6"
)

// ListeningPort is one TCP port listening inside an agent's environment.
type ListeningPort struct {
	Port    uint16
	Address string
	Family  AddressFamily
	// Process is the name of a process holding the socket ("" when the
	// agent may not read it).
	Process string
}

// ListeningPorts is what an agent last said listens inside its
// environment.
type ListeningPorts struct {
	Ports []ListeningPort
	// Truncated: more ports listen than MaxListeningPorts.
	Truncated bool
	// UpdatedAt is when the server received the list; zero when the agent
	// has not reported one on its current connection.
	UpdatedAt time.Time
}

// ListeningPortsReader reads the listening ports each connected agent
// reported (the agent link keeps them).
type ListeningPortsReader interface {
	// ListeningPorts returns agentID's list; an agent that is unknown or
	// has reported none has an empty one.
	ListeningPorts(agentID string) ListeningPorts
}
