package main

// The per-hop timeline of the keystroke echo (issue 33): agentic-mgmt and
// the agent mark each hop of a keystroke (internal/hoptrace, on with
// AGENTIC_HOP_TRACE), the bench notes when it sent each byte and when its
// echo came back, and each round trip is split at the marks that fall in
// it. One keystroke is in flight at a time, so a round trip's marks are its
// own.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// hopStep is a mark and what happens between the one before it and itself;
// or, with from, between the first mark named from in the round trip and
// the first of its own after that (aside: off the chain, as marks that may
// come before or after their neighbours).
type hopStep struct{ mark, what, from string }

// hopSteps are the marks in the order a keystroke passes them.
var hopSteps = []hopStep{
	{"mgmt.ws_read", "client writes the `input` frame → agentic-mgmt has read it off the WebSocket", ""},
	{"mgmt.link_send", "frame decoded and checked (role, scope), session and command looked up, offset given", ""},
	{"agent.link_stdin", "agent link: agentic-mgmt's send → HTTP/2 → the agent's receive loop", ""},
	{"agent.pty_write", "agent: the input is at the PTY writer, about to write(2)", ""},
	{"agent.pty_read", "write(2) to the tmux client's PTY → tmux server → pane PTY (its line discipline echoes) → tmux server redraws → the agent's PTY reader has it", ""},
	{"agent.queued", "agent: output message made and queued in the outbox", ""},
	{"mgmt.link_output", "agent link: the agent's send loop → HTTP/2 → agentic-mgmt's receive loop", ""},
	{"mgmt.stored", "agentic-mgmt: appended to the session log", ""},
	{"mgmt.ws_log_read", "the viewer's stream wakes and reads the log", ""},
	{"mgmt.ws_write", "`output` frame made and at the connection's writer, about to be written", ""},
	{"client.recv", "written to the WebSocket; the client has read and decoded it", ""},
}

// execStartSteps are the marks every REST exec passes, in order, from the
// request until its process started.
var execStartSteps = []hopStep{
	{"mgmt.rest_in", "client writes the request → agentic-mgmt's HTTP/1.1 server has read it and calls the REST handler chain", ""},
	{"mgmt.exec_request", "the REST chain (request id, auth, route, parameters and body checked against openapi.yaml, body decoded) → the exec handler", ""},
	{"mgmt.cmd_queued", "spec checked, command registered, the request queued for the agent's stream", ""},
	{"agent.cmd_read", "agent link: agentic-mgmt's send loop → HTTP/2 → the agent's receive loop", ""},
	{"agent.forking", "agent: the command set up (environment, PATH lookup, user, pipes), about to fork", ""},
	{"agent.proc_started", "fork/exec: Start returns once the child exec'd (and the readers and reaper are started)", ""},
}

// execHopSteps are the marks in the order a REST exec of `true` passes
// them (the exec part's per-hop timeline, -exec-hops).
var execHopSteps = append(slices.Clone(execStartSteps), []hopStep{
	{"agent.proc_waited", "the process runs and exits; reaped, its output drained, the result made", ""},
	{"agent.result_queued", "agent: end-of-output chunks and the result queued in the outbox", ""},
	{"mgmt.cmd_done", "agent link: the agent's send loop → HTTP/2 → agentic-mgmt's receive loop, the command finished", ""},
	{"mgmt.exec_woken", "the waiting REST handler wakes", ""},
	{"mgmt.exec_answered", "the JSON answer made and written to the ResponseWriter", ""},
	{"client.recv", "the server flushes the answer; the client has read it", ""},
}...)

// exec1MiBSteps are the marks in the order a REST exec of `cat` of 1 MiB
// passes them: the output reaches the handler while the process runs. The
// agent may reap `cat` before or after the handler has the first chunk,
// so those marks are timed aside (from), off the chain.
var exec1MiBSteps = append(slices.Clone(execStartSteps), []hopStep{
	{"agent.out_queued", "`cat` writes its first bytes → pipe → the agent's reader → the output message queued in the outbox", ""},
	{"agent.plane_new", "the send loop wakes, takes it and hands it to the output plane: a new data stream", ""},
	{"agent.post_run", "the data stream's goroutine runs", ""},
	{"agent.body_read", "(aside, from `agent.post_run`) the POST made and handed to the link's HTTP/2 transport, which sends HEADERS and reads the body's first bytes", "agent.post_run"},
	{"mgmt.output_in", "the POST made, its HEADERS sent → agentic-mgmt's HTTP/2 server → the output route's handler called (often before the agent's transport read the body: so not timed from `agent.body_read`)", ""},
	{"mgmt.output_admitted", "agent signed in, its connection and the command looked up", ""},
	{"mgmt.output_read", "the first bytes read from the request body", ""},
	{"mgmt.exec_output", "placed by offset and handed to the REST handler: it has the first chunk", ""},
	{"agent.proc_waited", "(aside, from `agent.proc_started`) `cat` runs, its output read by the agent; exits; reaped, its output drained, the result made", "agent.proc_started"},
	{"agent.result_queued", "(aside, from `agent.proc_waited`) end-of-output and the result queued in the outbox", "agent.proc_waited"},
	{"mgmt.cmd_done", "the rest of the output and then the result → agentic-mgmt, the command finished once its output got there", ""},
	{"mgmt.exec_woken", "the waiting REST handler wakes (a streamed answer: it has written what came before)", ""},
	{"mgmt.exec_answered", "the answer (the JSON form: all of it; a streamed one: its end) written to the ResponseWriter", ""},
	{"client.recv", "the server flushes the answer; the client has read (and, streamed, parsed) it", ""},
}...)

type hopTrace struct {
	dir   string
	trips [][2]int64 // unix ns: byte sent, echo read
	steps []hopStep
	title string
	warm  int // round trips left out at the start
}

// sub is another timeline over the same processes' marks (the same
// directory), for calls made after h's: each round trip takes the marks
// that fall in it.
func (h *hopTrace) sub(title string, steps []hopStep, warm int) *hopTrace {
	if h == nil {
		return nil
	}
	return &hopTrace{dir: h.dir, steps: steps, title: title, warm: warm}
}

func newExecHopTrace() (*hopTrace, error) {
	h, err := newHopTrace()
	if err != nil {
		return nil, err
	}
	h.steps, h.title = execHopSteps, "REST exec `true`"
	return h, nil
}

func newHopTrace() (*hopTrace, error) {
	dir, err := os.MkdirTemp("", "agentic-hops-")
	if err != nil {
		return nil, err
	}
	// The agent may run as a user of its own.
	if err := os.Chmod(dir, 0o1777); err != nil { //nolint:gosec // a scratch dir of marks, sticky
		return nil, err
	}
	return &hopTrace{dir: dir, steps: hopSteps, title: "Keystroke echo", warm: 50}, nil
}

func (h *hopTrace) env() string { return "AGENTIC_HOP_TRACE=" + h.dir }

// remove removes the marks, unless AGENTIC_HOP_KEEP is set (to look at
// them: every mark, not only the table's).
func (h *hopTrace) remove() {
	if os.Getenv("AGENTIC_HOP_KEEP") != "" {
		fmt.Fprintf(os.Stderr, "hop marks kept in %s\n", h.dir)
		return
	}
	_ = os.RemoveAll(h.dir)
}

// timed wraps the two halves of a round trip to note their times.
func (h *hopTrace) timed(input, readBack func(byte) error) (func(byte) error, func(byte) error) {
	in := func(b byte) error {
		h.trips = append(h.trips, [2]int64{time.Now().UnixNano(), 0})
		return input(b)
	}
	back := func(b byte) error {
		err := readBack(b)
		h.trips[len(h.trips)-1][1] = time.Now().UnixNano()
		return err
	}
	return in, back
}

// trip wraps a whole round trip (an exec) to note its times.
func (h *hopTrace) trip(f func() error) func() error {
	if h == nil {
		return f
	}
	return func() error {
		start := time.Now().UnixNano()
		err := f()
		h.trips = append(h.trips, [2]int64{start, time.Now().UnixNano()})
		return err
	}
}

type hopMark struct {
	at   int64
	name string
}

// marks reads what the processes wrote (they flush every 200 ms).
func (h *hopTrace) marks() ([]hopMark, error) {
	time.Sleep(time.Second)
	files, err := filepath.Glob(filepath.Join(h.dir, "*.hops"))
	if err != nil {
		return nil, err
	}
	var out []hopMark
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			ns, name, ok := strings.Cut(sc.Text(), " ")
			at, err := strconv.ParseInt(ns, 10, 64)
			if ok && err == nil {
				out = append(out, hopMark{at, name})
			}
		}
		f.Close()
	}
	slices.SortFunc(out, func(a, b hopMark) int { return int(a.at - b.at) })
	return out, nil
}

// print writes the per-hop table, or why there is none; nothing when the
// timeline was not asked for (h nil).
func (h *hopTrace) print() {
	if h == nil {
		return
	}
	table, err := h.report()
	if err != nil {
		fmt.Printf("\nper-hop timeline: %v\n", err)
		return
	}
	fmt.Print(table)
}

// report is the per-hop table: for each step the median over the round
// trips (warm-up excluded) in which every marked step was found, each step
// ending at the first mark of its name after the step before.
func (h *hopTrace) report() (string, error) {
	marks, err := h.marks()
	if err != nil {
		return "", err
	}
	seen := map[string]bool{"client.recv": true}
	for _, m := range marks {
		seen[m.name] = true
	}
	var steps []int
	for i, s := range h.steps {
		if seen[s.mark] {
			steps = append(steps, i)
		}
	}
	if len(steps) < 2 {
		return "", fmt.Errorf("no marks in %s (binaries without internal/hoptrace?)", h.dir)
	}
	trips := h.trips
	if len(trips) > h.warm {
		trips = trips[h.warm:]
	}
	deltas := make([][]time.Duration, len(steps))
	var totals []time.Duration
	complete := 0
	missing := map[string]int{}
	for _, t := range trips {
		if t[1] == 0 {
			continue
		}
		prev := t[0]
		d := make([]time.Duration, len(steps))
		ok := true
		// find is the first mark named name in [from, the trip's end].
		find := func(name string, from int64) (int64, bool) {
			i, _ := slices.BinarySearchFunc(marks, from, func(m hopMark, v int64) int { return int(m.at - v) })
			for i < len(marks) && marks[i].at <= t[1] && marks[i].name != name {
				i++
			}
			if i == len(marks) || marks[i].at > t[1] {
				return 0, false
			}
			return marks[i].at, true
		}
		for k, si := range steps {
			at := t[1]
			st := h.steps[si]
			if st.from != "" {
				// Aside: from the first mark named from, off the chain.
				start, found := find(st.from, t[0])
				if found {
					at, found = find(st.mark, start)
				}
				if !found {
					ok = false
					missing[st.mark]++
					break
				}
				d[k] = time.Duration(at - start)
				continue
			}
			if st.mark != "client.recv" {
				var found bool
				if at, found = find(st.mark, prev); !found {
					ok = false
					missing[st.mark]++
					break
				}
			}
			d[k] = time.Duration(at - prev)
			prev = at
		}
		if !ok {
			continue
		}
		complete++
		totals = append(totals, time.Duration(t[1]-t[0]))
		for k := range steps {
			deltas[k] = append(deltas[k], d[k])
		}
	}
	if complete == 0 {
		return "", fmt.Errorf("no round trip had all its marks (%d marks, %d round trips)", len(marks), len(trips))
	}
	median := func(x []time.Duration) time.Duration {
		y := slices.Clone(x)
		slices.Sort(y)
		return y[len(y)/2]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s, per hop (AGENTIC_HOP_TRACE marks; %d of %d round trips had every mark; median of each step, so the steps need not add up to the round trip's median %s):\n\n", h.title, complete, len(trips), ms(median(totals)))
	fmt.Fprintln(&b, "| step | ends at | median | p90 |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- |")
	var sum time.Duration
	for k, si := range steps {
		m := median(deltas[k])
		if h.steps[si].from == "" {
			sum += m
		}
		y := slices.Clone(deltas[k])
		slices.Sort(y)
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", h.steps[si].what, h.steps[si].mark, ms(m), ms(y[len(y)*9/10]))
	}
	fmt.Fprintf(&b, "| sum of the step medians (asides left out) | | %s | |\n", ms(sum))
	if len(missing) > 0 {
		fmt.Fprintf(&b, "\nRound trips left out, by the first mark not found in them: %v\n", missing)
	}
	return b.String(), nil
}
