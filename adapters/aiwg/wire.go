package aiwg

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// wireEvent is one event frame. Seq stays local: it orders the outbox,
// aiwg serve has no use for it.
type wireEvent struct {
	Event      ports.EventType `json:"event"`
	ExecutorID string          `json:"executor_id"`
	MissionID  string          `json:"mission_id,omitempty"`
	TS         string          `json:"ts"`
	Data       map[string]any  `json:"data"`
}

// encodeEvent renders ev as an executor stream frame.
func encodeEvent(ev ports.Event, executorID string, now time.Time) ([]byte, error) {
	ts := ev.TS
	if ts.IsZero() {
		ts = now
	}
	data := ev.Data
	if data == nil {
		data = map[string]any{}
	}
	w := wireEvent{Event: ev.Type, ExecutorID: executorID, MissionID: ev.MissionID, TS: ports.FormatTimestamp(ts), Data: data}
	if ev.Type == ports.EventResync { // the first frame on every connect; it has no mission
		w.MissionID = ""
	}
	return json.Marshal(w)
}

// inboundFrame is what aiwg serve sends on the executor stream.
type inboundFrame struct {
	Event ports.EventType `json:"event"`
	Data  json.RawMessage `json:"data"`
}

type hitlResponded struct {
	HITLID *string `json:"hitl_id"`
	Text   *string `json:"text"`
}

// hubCallTimeout bounds a hub call made for an inbound frame, so that the
// reader gets back to reading (and answering pings) soon.
const hubCallTimeout = 10 * time.Second

// handleInbound acts on one inbound text frame. Nothing it is given may
// break the connection: bad frames are logged and dropped. Frame contents
// are not logged, since a HITL answer may be sensitive.
func (c *Client) handleInbound(ctx context.Context, raw []byte) {
	var f inboundFrame
	if err := json.Unmarshal(raw, &f); err != nil {
		c.log.Warn("aiwg: malformed frame on executor stream ignored", "bytes", len(raw), "err", c.scrub(err.Error()))
		return
	}
	switch f.Event {
	case ports.EventHITLResponded:
		var d hitlResponded
		if len(f.Data) == 0 || json.Unmarshal(f.Data, &d) != nil || d.HITLID == nil || *d.HITLID == "" || d.Text == nil {
			c.log.Warn("aiwg: mission.hitl_responded without hitl_id and text ignored")
			return
		}
		if c.cfg.Hub == nil {
			return
		}
		hctx, cancel := context.WithTimeout(ctx, hubCallTimeout)
		defer cancel()
		if err := c.cfg.Hub.HITLResponded(hctx, *d.HITLID, *d.Text); err != nil {
			c.log.Warn("aiwg: HITL answer not applied", "hitl_id", *d.HITLID, "err", c.scrub(err.Error()))
		}
	case "":
		c.log.Warn("aiwg: frame without event ignored", "bytes", len(raw))
	default:
		c.log.Debug("aiwg: unknown event on executor stream ignored", "event", truncate(string(f.Event), 64))
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
