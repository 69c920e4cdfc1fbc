package task

import (
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Event types of a task's event stream.
const (
	EventState    = "state"
	EventActivity = "activity"
	EventOutput   = "output"
	EventEnd      = "end"
)

// Event is one entry of a task's event stream; IDs count from 1.
type Event struct {
	ID   int64
	Type string
	Data any
}

// StateData is a state event's data.
type StateData struct {
	State  string    `json:"state"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

// OutputData is an output event's data: bytes at an offset of the run's output.
type OutputData struct {
	Offset int64  `json:"offset"`
	Data   string `json:"data"`
}

// ActivityData is an activity event's data: one entry of claude's feed.
type ActivityData struct {
	Kind     string  `json:"kind"`
	Text     string  `json:"text,omitempty"`
	ToolName string  `json:"tool_name,omitempty"`
	IsError  bool    `json:"is_error,omitempty"`
	CostUSD  float64 `json:"cost_usd,omitempty"`
}

// Bounds of the events kept per task: the oldest output goes first.
const (
	maxEvents      = 20000
	maxOutputBytes = 8 << 20
)

// eventLog is a task's events, in memory; a restart keeps the state events
// (rebuilt from the phases) and loses older output, which offsets show.
type eventLog struct {
	events      []Event
	next        int64
	outputBytes int
	changed     chan struct{}
}

func (l *eventLog) add(typ string, data any) {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	l.next++
	l.events = append(l.events, Event{ID: l.next, Type: typ, Data: data})
	if o, ok := data.(OutputData); ok {
		l.outputBytes += len(o.Data)
	}
	for len(l.events) > maxEvents || l.outputBytes > maxOutputBytes {
		if o, ok := l.events[0].Data.(OutputData); ok {
			l.outputBytes -= len(o.Data)
		}
		l.events = l.events[1:]
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// Events returns a task's events after the one with id after, a channel
// closed when more come, and whether the stream is over (its end sent).
func (s *Service) Events(id string, after int64) (events []Event, more <-chan struct{}, over bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.tasks[id]
	if !ok {
		return nil, nil, false, ports.ErrTaskNotFound
	}
	l := &e.events
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	for _, ev := range l.events {
		if ev.ID > after {
			events = append(events, ev)
		}
	}
	last := len(l.events) - 1
	over = last >= 0 && l.events[last].Type == EventEnd && after >= l.events[last].ID
	return events, l.changed, over, nil
}
