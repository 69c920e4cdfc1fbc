package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// sseEvent is one event of a server-sent event stream.
type sseEvent struct{ event, id, data string }

// readSSE calls each with every event of r until r ends or each says stop.
func readSSE(r io.Reader, each func(sseEvent) (stop bool)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var ev sseEvent
	var data []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if ev.event != "" || len(data) > 0 {
				ev.data = strings.Join(data, "\n")
				if each(ev) {
					return nil
				}
			}
			ev, data = sseEvent{}, nil
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		switch k {
		case "event":
			ev.event = v
		case "id":
			ev.id = v
		case "data":
			data = append(data, v)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF // the stream ends after its end event, never before
}

// followTask shows a task as its event stream tells it: each phase with
// when it began and how long the one before took, claude's activity (tool
// calls, messages, its result), the run's output lines, and at the end its
// progress; it exits with the outcome. A stream cut off (the server
// restarted) is opened again after the last event seen.
func (c *cli) followTask(cl *restapi.ClientWithResponses, server, id string, claude bool) int {
	f := &taskFollower{c: c, claude: claude}
	lastID := ""
	var lastErr error
	// failures counts the opens in a row that brought no event: a minute
	// of them (the server gone for good) ends the wait.
	failures := 0
	for ; ; failures++ {
		if failures > 0 {
			if failures > 60 {
				return c.unreachable(server, fmt.Errorf("the task's event stream: %w", lastErr))
			}
			time.Sleep(time.Second)
		}
		params := &restapi.TaskEventsParams{}
		if lastID != "" {
			params.LastEventID = &lastID
		}
		resp, err := cl.TaskEvents(context.Background(), id, params)
		if err != nil {
			lastErr = err
			continue
		}
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				lastErr = fmt.Errorf("HTTP %d", resp.StatusCode)
				continue
			}
			return c.apiError(resp.StatusCode, body)
		}
		var end *restapi.Task
		err = readSSE(resp.Body, func(ev sseEvent) bool {
			if ev.id != "" {
				lastID = ev.id
				failures = 0
			}
			if ev.event == "end" {
				var t restapi.Task
				if json.Unmarshal([]byte(ev.data), &t) == nil {
					end = &t
				}
				return true
			}
			f.show(ev)
			return false
		})
		resp.Body.Close()
		if end != nil {
			return f.end(id, end)
		}
		if err == nil {
			err = errors.New("an end event that is not a task")
		}
		lastErr = err
	}
}

// taskFollower prints a task's events for a person.
type taskFollower struct {
	c      *cli
	claude bool
	// state and at are the phase shown last.
	state string
	at    time.Time
	// partial is output after its last newline, until the rest comes.
	partial string
}

func (f *taskFollower) show(ev sseEvent) {
	out := f.c.stdout
	switch ev.event {
	case "state":
		var s struct {
			State string    `json:"state"`
			At    time.Time `json:"at"`
		}
		if json.Unmarshal([]byte(ev.data), &s) != nil {
			return
		}
		f.flush()
		took := ""
		if f.state != "" {
			took = fmt.Sprintf(" (%s took %s)", f.state, s.At.Sub(f.at).Round(time.Millisecond))
		}
		fmt.Fprintf(out, "%s  %s%s\n", s.At.UTC().Format("15:04:05.000"), cell(s.State), took)
		f.state, f.at = s.State, s.At
	case "activity":
		var a struct {
			Kind     string  `json:"kind"`
			Text     string  `json:"text"`
			ToolName string  `json:"tool_name"`
			IsError  bool    `json:"is_error"`
			CostUSD  float64 `json:"cost_usd"`
		}
		if json.Unmarshal([]byte(ev.data), &a) != nil {
			return
		}
		switch a.Kind {
		case "tool_call":
			fmt.Fprintf(out, "  tool %s\n", cell(a.ToolName))
		case "tool_result":
			if a.IsError {
				fmt.Fprintf(out, "  tool %s failed: %s\n", cell(a.ToolName), firstLine(a.Text))
			}
		case "assistant_text":
			fmt.Fprintf(out, "  claude: %s\n", firstLine(a.Text))
		case "result":
			word := "result"
			if a.IsError {
				word = "result (an error)"
			}
			if a.Text == "" {
				fmt.Fprintf(out, "  %s\n", word)
			} else {
				fmt.Fprintf(out, "  %s: %s\n", word, firstLine(a.Text))
			}
		}
	case "output":
		var o struct {
			Data string `json:"data"`
		}
		if json.Unmarshal([]byte(ev.data), &o) != nil {
			return
		}
		lines := strings.Split(f.partial+o.Data, "\n")
		f.partial = lines[len(lines)-1]
		for _, l := range lines[:len(lines)-1] {
			f.line(l)
		}
	}
}

// line prints one line of the run's output; claude's own stream-json is
// shown as its activity instead.
func (f *taskFollower) line(l string) {
	if f.claude && json.Valid([]byte(l)) && strings.HasPrefix(strings.TrimSpace(l), "{") {
		return
	}
	fmt.Fprintf(f.c.stdout, "  | %s\n", cell(clipTo(l, 300)))
}

// flush prints output that did not end with a newline.
func (f *taskFollower) flush() {
	if f.partial != "" {
		f.line(f.partial)
		f.partial = ""
	}
}

// end prints the task's progress and outcome; the exit status is 0 when
// it completed, else the run's exit code (or 1).
func (f *taskFollower) end(id string, t *restapi.Task) int {
	f.flush()
	pr := t.Progress
	line := fmt.Sprintf("  output %d B", pr.OutputBytes)
	if f.claude {
		line += fmt.Sprintf(", tool calls %d, turns %d, cost $%.4f", pr.ToolCalls, pr.Turns, pr.CostUsd)
	}
	fmt.Fprintln(f.c.stdout, line)
	if t.State == "completed" {
		return 0
	}
	reason, msg := deref(t.Reason), deref(t.Error)
	// The reason once: a server from before said it again in the error.
	msg = strings.TrimSpace(strings.TrimPrefix(msg, reason))
	switch {
	case reason != "" && msg != "":
		fmt.Fprintf(f.c.stderr, "agenticctl: task %s %s (%s): %s\n", id, t.State, cell(reason), cell(clipTo(msg, 2000)))
	case reason != "":
		fmt.Fprintf(f.c.stderr, "agenticctl: task %s %s (%s)\n", id, t.State, cell(reason))
	default:
		fmt.Fprintf(f.c.stderr, "agenticctl: task %s %s\n", id, t.State)
	}
	if t.State == "failed_preserved" && t.PreserveUntil != nil {
		fmt.Fprintf(f.c.stderr, "its environment %s is kept until %s ('agenticctl task cancel %s' destroys it now)\n",
			cell(t.Environment.Name), t.PreserveUntil.UTC().Format(time.RFC3339), id)
	}
	if t.ExitCode != nil && *t.ExitCode > 0 && *t.ExitCode < 256 {
		return *t.ExitCode
	}
	return exitError
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// firstLine is the first line of s, bounded, for a one-line feed.
func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return cell(clipTo(s, 200))
}

// clipTo bounds s to n bytes, whole runes.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
