package portsfake

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ErrClosed is what an Outbox answers after Close.
var ErrClosed = errors.New("outbox closed")

// Outbox is a fake ports.EventOutbox. What it keeps stands for the disk:
// Reopen gives a new outbox over it, as a restarted server opens the file
// store again.
type Outbox struct {
	kept     *outboxKept
	notify   chan struct{}
	onAppend func(ports.Event)

	mu     sync.Mutex
	closed bool
}

// outboxKept is what survives a Reopen.
type outboxKept struct {
	mu     sync.Mutex
	events []ports.Event
	seq    uint64
	acked  uint64
	err    error
}

var _ ports.EventOutbox = (*Outbox)(nil)

// OutboxOption shapes an Outbox.
type OutboxOption func(*Outbox)

// OnAppend passes every appended event to f, in Seq order, while the
// append holds the outbox (f must not call it).
func OnAppend(f func(ports.Event)) OutboxOption { return func(o *Outbox) { o.onAppend = f } }

// NewOutbox returns an empty outbox.
func NewOutbox(opts ...OutboxOption) *Outbox {
	o := &Outbox{kept: &outboxKept{}, notify: make(chan struct{}, 1)}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// Reopen returns a new outbox over what this one kept, with its options.
func (o *Outbox) Reopen() *Outbox {
	return &Outbox{kept: o.kept, notify: make(chan struct{}, 1), onAppend: o.onAppend}
}

func (o *Outbox) isClosed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

// Append implements ports.EventOutbox; it fails with the error SetErr gave.
func (o *Outbox) Append(_ context.Context, evs ...ports.Event) ([]ports.Event, error) {
	if o.isClosed() {
		return nil, ErrClosed
	}
	k := o.kept
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return nil, k.err
	}
	out := make([]ports.Event, 0, len(evs))
	for _, e := range evs {
		k.seq++
		e.Seq = k.seq
		k.events = append(k.events, e)
		out = append(out, e)
		if o.onAppend != nil {
			o.onAppend(e)
		}
	}
	if len(evs) > 0 {
		select {
		case o.notify <- struct{}{}:
		default:
		}
	}
	return out, nil
}

// Pending implements ports.EventOutbox.
func (o *Outbox) Pending(after uint64, max int) ([]ports.Event, error) {
	if o.isClosed() {
		return nil, ErrClosed
	}
	k := o.kept
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []ports.Event
	for _, e := range k.events {
		if e.Seq > after && e.Seq > k.acked && len(out) < max {
			out = append(out, e)
		}
	}
	return out, nil
}

// Ack implements ports.EventOutbox.
func (o *Outbox) Ack(seq uint64) error {
	if o.isClosed() {
		return ErrClosed
	}
	k := o.kept
	k.mu.Lock()
	defer k.mu.Unlock()
	k.acked = max(k.acked, seq)
	return nil
}

// Acked implements ports.EventOutbox.
func (o *Outbox) Acked() uint64 {
	k := o.kept
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.acked
}

// Notify implements ports.EventOutbox.
func (o *Outbox) Notify() <-chan struct{} { return o.notify }

// Close implements ports.EventOutbox.
func (o *Outbox) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	return nil
}

// SetErr makes every later Append fail with err (nil: succeed), as a full
// disk does.
func (o *Outbox) SetErr(err error) {
	o.kept.mu.Lock()
	defer o.kept.mu.Unlock()
	o.kept.err = err
}

// Events returns every event appended, delivered or not, in order.
func (o *Outbox) Events() []ports.Event {
	o.kept.mu.Lock()
	defer o.kept.mu.Unlock()
	return slices.Clone(o.kept.events)
}
