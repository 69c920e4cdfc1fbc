package aiwg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// pendingBatch is how many outbox events are read at a time.
const pendingBatch = 256

// errKicked ends a session on Reconnect.
var errKicked = errors.New("reconnect requested")

// executorLoop keeps the executor registered and its stream open until ctx
// ends.
func (c *Client) executorLoop(ctx context.Context) {
	if c.cfg.Hub == nil || c.cfg.Outbox == nil {
		c.log.Error("aiwg: executor side disabled: no mission hub or outbox")
		return
	}
	c.keepConnected(ctx, side{name: "executor", kick: c.execKick, register: c.registerExecutor, session: c.executorSession})
}

// executorRegistration is the body of POST /api/v1/executors/register.
type executorRegistration struct {
	ExecutorID         string             `json:"executor_id"`
	Name               string             `json:"name"`
	Version            string             `json:"version"`
	SpecVersion        string             `json:"spec_version"`
	TransportEndpoints transportEndpoints `json:"transport_endpoints"`
	Capabilities       []string           `json:"capabilities"`
}

type transportEndpoints struct {
	REST string `json:"rest"`
	WS   string `json:"ws"`
}

// registerExecutor makes the executor registration and records its outcome
// (the status shows the last error).
func (c *Client) registerExecutor(ctx context.Context) (id, token string, err error) {
	var a registrationAnswer
	err = c.postJSON(ctx, []string{"api", "v1", "executors", "register"}, executorRegistration{
		ExecutorID:  c.cfg.InstanceID,
		Name:        c.ExecutorName(),
		Version:     c.cfg.Version,
		SpecVersion: SpecVersion,
		TransportEndpoints: transportEndpoints{
			REST: c.cfg.RESTEndpoint,
			WS:   c.cfg.WSEndpoint,
		},
		Capabilities: c.capabilities(),
	}, &a)
	if err == nil && a.Token == "" {
		err = errors.New("answer without token")
	}
	if err != nil {
		err = fmt.Errorf("executor registration: %s", c.errText(err))
		if ctx.Err() == nil {
			c.mu.Lock()
			c.regErr = err.Error()
			c.mu.Unlock()
		}
		return "", "", err
	}
	id = a.ExecutorID
	if id == "" {
		id = c.cfg.InstanceID
	}
	c.mu.Lock()
	c.execID, c.execToken, c.regErr = id, a.Token, ""
	c.rememberTokenLocked(a.Token)
	c.mu.Unlock()
	if id != c.cfg.InstanceID {
		c.log.Warn("aiwg: executor registered under another id", "executor_id", id, "instance_id", c.cfg.InstanceID)
	}
	c.log.Info("aiwg: executor registered", "executor_id", id, "name", c.ExecutorName())
	return id, a.Token, nil
}

// executorSession runs one connection of the executor stream: resync,
// backlog, resync pairs, then live events until the stream breaks, ctx
// ends or Reconnect is called. up reports whether the resync got through.
func (c *Client) executorSession(ctx context.Context, id, token string) (up bool, err error) {
	out := c.cfg.Outbox
	raw := c.streamURL(token, "ws", "executors", url.PathEscape(id))
	conn, resp, err := c.dial(ctx, raw)
	if err != nil {
		if isAuthRejection(resp) {
			// The next round registers again and so gets a new token.
			return false, errors.New("executor stream token rejected (" + resp.Status + "); registering again")
		}
		return false, errors.New("executor stream " + c.handshakeError(err, resp))
	}
	c.log.Info("aiwg: executor stream connected", "url", redactURL(raw))

	var conf confirmations
	// acked is touched only by the reader goroutine, through onPong.
	acked := out.Acked()
	cursor := acked
	onPong := func(p string) {
		seq, ok := conf.pong(p)
		if !ok || seq <= acked {
			return
		}
		if err := out.Ack(seq); err != nil {
			c.log.Warn("aiwg: outbox ack failed; events may be sent again", "seq", seq, "err", err.Error())
			return
		}
		acked = seq
	}
	s := c.startReader(conn, func(b []byte) { c.handleInbound(ctx, b) }, onPong)
	defer func() {
		c.setConnected(false)
		s.close()
	}()

	// Events already in the outbox before Resync go before its pairs; those
	// appended later are live and go after them, so aiwg serve never sees
	// a mission resumed after it saw the mission end.
	boundary, err := backlogEnd(out, cursor)
	if err != nil {
		return false, fmt.Errorf("outbox: %w", err)
	}
	resync, pairs, err := c.cfg.Hub.Resync(ctx)
	if err != nil {
		return false, fmt.Errorf("resync: %w", err)
	}
	now := c.cfg.Clock.Now
	if err := c.writeEvent(s, resync, id, now()); err != nil {
		return false, err
	}
	c.setConnected(true)

	// send writes the outbox events after the cursor up to limit (0: all)
	// and returns how many it wrote.
	send := func(limit uint64) (int, error) {
		total := 0
		for {
			evs, err := out.Pending(cursor, pendingBatch)
			if err != nil {
				return total, fmt.Errorf("outbox: %w", err)
			}
			n := 0
			for _, ev := range evs {
				if ev.Seq <= cursor {
					continue
				}
				if limit != 0 && ev.Seq > limit {
					break
				}
				if err := c.writeEvent(s, ev, id, now()); err != nil {
					return total, err
				}
				cursor = ev.Seq
				n++
			}
			total += n
			if n == 0 || len(evs) < pendingBatch || (limit != 0 && cursor >= limit) {
				break
			}
		}
		return total, nil
	}
	// drain sends them and a ping to have them confirmed.
	drain := func(limit uint64) error {
		n, err := send(limit)
		if err != nil || n == 0 {
			return err
		}
		return s.ping(conf.add(cursor))
	}

	if boundary > cursor {
		if err := drain(boundary); err != nil {
			return true, err
		}
	}
	for _, ev := range pairs {
		if err := c.writeEvent(s, ev, id, now()); err != nil {
			return true, err
		}
	}
	if err := drain(0); err != nil {
		return true, err
	}

	t := time.NewTicker(c.cfg.PingInterval)
	defer t.Stop()
	notify := out.Notify()
	// Live events are confirmed by one ping per confirmDelay at most, not
	// one per event: each confirmation is a flushed ack, and under load one
	// per event would compete with the missions' own writes for the disk.
	// A crash before the ping only means those events are sent again.
	confirm := time.NewTimer(time.Hour)
	confirm.Stop()
	defer confirm.Stop()
	confirmArmed := false
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-s.done:
			return true, errors.New(c.errText(s.err))
		case <-c.execKick:
			c.log.Info("aiwg: executor stream reconnect requested")
			return true, errKicked
		case <-notify:
			n, err := send(0)
			if err != nil {
				return true, err
			}
			if n > 0 && !confirmArmed {
				confirm.Reset(confirmDelay)
				confirmArmed = true
			}
		case <-confirm.C:
			confirmArmed = false
			if err := s.ping(conf.add(cursor)); err != nil {
				return true, errors.New(c.errText(err))
			}
		case <-t.C:
			if err := s.ping(conf.add(cursor)); err != nil {
				return true, errors.New(c.errText(err))
			}
		}
	}
}

// confirmations maps pings to the last event seq written before each.
// A WebSocket peer answers pings in order, after reading every frame sent
// before them, so a pong proves that those frames arrived: only then is
// the outbox acked. A successful write proves nothing of the kind (the
// bytes may die in a socket buffer), and the contract never drops events.
type confirmations struct {
	mu    sync.Mutex
	next  uint64
	marks []mark
}

type mark struct{ ping, seq uint64 }

// add records that a ping about to be sent follows seq; it returns the ping payload.
func (k *confirmations) add(seq uint64) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.next++
	k.marks = append(k.marks, mark{ping: k.next, seq: seq})
	return "c" + strconv.FormatUint(k.next, 10)
}

// pong returns the highest seq confirmed by a pong with payload p.
func (k *confirmations) pong(p string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimPrefix(p, "c"), 10, 64)
	if err != nil || !strings.HasPrefix(p, "c") {
		return 0, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var seq uint64
	found := false
	i := 0
	for ; i < len(k.marks) && k.marks[i].ping <= n; i++ {
		seq, found = max(seq, k.marks[i].seq), true
	}
	k.marks = k.marks[i:]
	return seq, found
}

// backlogEnd is the seq of the last event pending after cursor (cursor
// when none).
func backlogEnd(out ports.EventOutbox, cursor uint64) (uint64, error) {
	for {
		evs, err := out.Pending(cursor, pendingBatch)
		if err != nil {
			return 0, err
		}
		if len(evs) == 0 {
			return cursor, nil
		}
		last := evs[len(evs)-1].Seq
		if last <= cursor {
			return cursor, nil
		}
		cursor = last
		if len(evs) < pendingBatch {
			return cursor, nil
		}
	}
}

// writeEvent sends one event frame.
func (c *Client) writeEvent(s *stream, ev ports.Event, executorID string, now time.Time) error {
	b, err := encodeEvent(ev, executorID, now)
	if err != nil {
		// Data that cannot be encoded (a NaN, say) would block the stream
		// for good: the event goes out without it rather than not at all.
		c.log.Error("aiwg: event data not encodable; sent without data", "event", ev.Type, "seq", ev.Seq, "err", err.Error())
		ev.Data = nil
		if b, err = encodeEvent(ev, executorID, now); err != nil {
			return err
		}
	}
	if err := s.writeText(b); err != nil {
		return errors.New(c.errText(err))
	}
	return nil
}

func (c *Client) setConnected(v bool) {
	c.mu.Lock()
	c.connected = v
	c.mu.Unlock()
}
