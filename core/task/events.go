package task

import (
	"encoding/json"
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

// eventLog is a task's events, in memory, each also handed to keep (the
// Config.EventLog) so that a restart reads them back with their ids.
type eventLog struct {
	events      []Event
	next        int64
	outputBytes int
	changed     chan struct{}
	keep        func(Event)
}

func (l *eventLog) add(typ string, data any) {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	l.next++
	ev := Event{ID: l.next, Type: typ, Data: data}
	l.events = append(l.events, ev)
	if l.keep != nil {
		l.keep(ev)
	}
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

// maxStoredOutputBytes bounds the output kept on disk per task; state and
// activity events are always kept.
const maxStoredOutputBytes = 16 << 20

// keeper stores a task's events as they are added (all but the end, which
// Load makes again from the record, with the same id).
func (s *Service) keeper(id string, stored int) func(Event) {
	if s.cfg.EventLog == nil {
		return nil
	}
	failed := false
	return func(ev Event) {
		if ev.Type == EventEnd {
			return
		}
		b, err := json.Marshal(ev.Data)
		if err != nil {
			return
		}
		if ev.Type == EventOutput {
			if stored+len(b) > maxStoredOutputBytes {
				return
			}
			stored += len(b)
		}
		if err := s.cfg.EventLog.Append(id, ports.TaskEvent{ID: ev.ID, Type: ev.Type, Data: b}); err != nil && !failed {
			failed = true // said once a task: the stream goes on in memory
			s.log.Warn("a task's events are not kept past a restart", "task_id", id, "err", err)
		}
	}
}

// restoreEvents reads back what keeper stored for a loaded task; false when
// nothing was (a task from before events were kept), and the stored output
// size.
func (s *Service) restoreEvents(e *entry) (ok bool, outputBytes int) {
	if s.cfg.EventLog == nil {
		return false, 0
	}
	stored, err := s.cfg.EventLog.Read(e.rec.ID)
	if err != nil {
		s.log.Warn("a task's stored events could not be read", "task_id", e.rec.ID, "err", err)
		return false, 0
	}
	for _, se := range stored {
		var data any
		var err error
		switch se.Type {
		case EventState:
			var d StateData
			err, data = json.Unmarshal(se.Data, &d), d
		case EventOutput:
			var d OutputData
			err, data = json.Unmarshal(se.Data, &d), d
			outputBytes += len(se.Data)
		case EventActivity:
			var d ActivityData
			err, data = json.Unmarshal(se.Data, &d), d
		default:
			continue
		}
		if err != nil || se.ID <= e.events.next {
			continue // out of order or unreadable: never an id twice
		}
		e.events.next = se.ID - 1
		e.events.add(se.Type, data)
		ok = true
	}
	return ok, outputBytes
}
