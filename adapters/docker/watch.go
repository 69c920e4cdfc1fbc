package docker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/events"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Event is a change of one of this server's containers, whoever caused it
// (this adapter, `docker kill`, the OOM killer, a daemon restart).
type Event struct {
	Name string
	// Action is the engine's: start, die, oom, pause, unpause or destroy.
	Action string
	// Env is the environment just after the event. When Removed, only
	// Name, Runtime and RuntimeID are set.
	Env     ports.Environment
	Removed bool
	// ExitCode is the process's exit status on "die" (137 after SIGKILL).
	ExitCode int
	Time     time.Time
}

var watchedActions = []events.Action{
	events.ActionStart, events.ActionDie, events.ActionOOM,
	events.ActionPause, events.ActionUnPause, events.ActionDestroy,
}

// ActionReconnect is the Action of the Event Watch sends, with no Name,
// when its stream came back after a loss: the engine replays what it still
// holds, but it holds events in memory only, so after its own restart the
// caller should List to catch up.
const ActionReconnect = "reconnect"

// Watch calls fn, one event at a time on Watch's goroutine, for every change
// of this owner's containers from since (zero: the moment of the call) until
// ctx ends, and then returns ctx's error. Events are asked for from a time
// rather than from when the stream opens, so none is lost to the connection
// setup; after a dropped stream it asks again from just after the last
// event it saw.
func (r *Runtime) Watch(ctx context.Context, since time.Time, fn func(Event)) error {
	if since.IsZero() {
		since = time.Now()
	}
	f := r.ownerFilter()
	f.Add("type", string(events.ContainerEventType))
	for _, a := range watchedActions {
		f.Add("event", string(a))
	}
	const minBackoff, maxBackoff = 250 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	lost := false
	for {
		check := r.ready
		if lost {
			check = r.Ping // ready no longer asks the engine once negotiated
		}
		if err := check(ctx); err == nil {
			sctx, cancel := context.WithCancel(ctx)
			msgs, errs := r.cli.Events(sctx, events.ListOptions{Since: unixNano(since), Filters: f})
			if lost {
				backoff = minBackoff
				fn(Event{Action: ActionReconnect, Time: time.Now()})
			}
		stream:
			for {
				select {
				case <-ctx.Done():
					break stream
				case err := <-errs:
					_ = err // the stream dropped: asked again, after a backoff, from since
					break stream
				case m := <-msgs:
					at := time.Unix(0, m.TimeNano)
					// A new subscription starts just after this event.
					since = at.Add(time.Nanosecond)
					fn(r.event(ctx, m, at))
				}
			}
			cancel()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lost = true
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func (r *Runtime) event(ctx context.Context, m events.Message, at time.Time) Event {
	ev := Event{
		Name:   m.Actor.Attributes[LabelEnv],
		Action: string(m.Action),
		Time:   at,
		Env:    ports.Environment{Name: m.Actor.Attributes[LabelEnv], Runtime: RuntimeName, RuntimeID: m.Actor.ID},
	}
	if code, err := strconv.Atoi(m.Actor.Attributes["exitCode"]); err == nil {
		ev.ExitCode = code
	}
	if m.Action == events.ActionDestroy {
		ev.Removed = true
		return ev
	}
	c, err := r.cli.ContainerInspect(ctx, m.Actor.ID)
	switch {
	case err == nil:
		ev.Env = r.markHibernated(toEnv(c))
	case cerrdefs.IsNotFound(err):
		ev.Removed = true
	default:
		// The engine answered the stream but not the inspect: report what
		// the event itself says.
		if m.Action == events.ActionDie || m.Action == events.ActionOOM {
			ev.Env.State = ports.EnvStopped
			ev.Env.Detail = "exit code " + m.Actor.Attributes["exitCode"]
		}
	}
	return ev
}

func unixNano(t time.Time) string {
	return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
}
