package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/task"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

const taskUsage = `Usage:
  agenticctl task submit -f MANIFEST.yaml [--follow] [--idempotency-key K] [--dry-run]
                                  submit a task ('-' reads stdin); --follow shows its phases,
                                  then its progress as it comes (claude's tool calls, messages
                                  and result; the run's output lines, '| ' before each) and
                                  exits with its outcome (0: completed; the run's exit code)
  agenticctl task list [--state S,S] [--label k=v] [--json]
  agenticctl task get ID          the task as JSON
  agenticctl task cancel ID       end its process and environment
  agenticctl task artifacts ID [--download DIR]
  agenticctl task logs ID [-f]    the run's output kept so far (-f: follow until the task ends)
`

func (c *cli) task(args []string) int {
	return c.group("task", taskUsage, args,
		verb{[]string{"submit"}, c.taskSubmit},
		verb{[]string{"list", "ls"}, c.taskList},
		verb{[]string{"get", "show"}, c.taskGet},
		verb{[]string{"cancel", "rm"}, c.taskCancel},
		verb{[]string{"artifacts"}, c.taskArtifacts},
		verb{[]string{"logs"}, c.taskLogs})
}

func (c *cli) taskSubmit(args []string) int {
	flags := c.flagSet("agenticctl task submit")
	file := flags.String("f", "", "the manifest (YAML or JSON); - for stdin")
	follow := flags.Bool("follow", false, "follow the task until it ends; exit with its outcome")
	key := flags.String("idempotency-key", "", "the same key and manifest return the same task")
	dry := flags.Bool("dry-run", false, "only validate; print the normalised manifest")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, taskUsage); done {
		return code
	}
	if *file == "" {
		return c.fail("task submit needs -f MANIFEST")
	}
	var doc []byte
	var err error
	if *file == "-" {
		doc, err = io.ReadAll(io.LimitReader(c.stdin, 1<<20))
	} else {
		doc, err = os.ReadFile(*file)
	}
	if err != nil {
		return c.fail("reading the manifest: %v", err)
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	params := &restapi.CreateTaskParams{}
	if *dry {
		params.DryRun = dry
	}
	if *key != "" {
		params.IdempotencyKey = key
	}
	resp, err := cl.CreateTaskWithBodyWithResponse(context.Background(), params, "application/yaml", strings.NewReader(string(doc)))
	if err != nil {
		return c.unreachable(server, err)
	}
	if *dry {
		if resp.StatusCode() != http.StatusOK {
			return c.apiError(resp.StatusCode(), resp.Body)
		}
		return c.printJSON(resp.Body)
	}
	if resp.JSON202 == nil {
		return c.apiError(resp.StatusCode(), resp.Body)
	}
	id := resp.JSON202.TaskId
	if !*follow {
		fmt.Fprintln(c.stdout, id)
		return 0
	}
	fmt.Fprintf(c.stderr, "task %s\n", id)
	m, err := task.Parse(doc)
	return c.followTask(cl, server, id, err == nil && m.Claude != nil)
}

func (c *cli) taskList(args []string) int {
	flags := c.flagSet("agenticctl task list")
	state := flags.String("state", "", "comma-separated states")
	var labels multiFlag
	flags.Var(&labels, "label", "key=value (repeatable)")
	asJSON := flags.Bool("json", false, "print the server's JSON")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, taskUsage); done {
		return code
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	params := &restapi.ListTasksParams{}
	if *state != "" {
		params.State = state
	}
	if len(labels) > 0 {
		l := []string(labels)
		params.Label = &l
	}
	resp, err := cl.ListTasksWithResponse(context.Background(), params)
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	return c.list(*asJSON, resp.Body, "ID\tNAME\tSTATE\tREASON\tRUNTIME\tCREATED", func(w io.Writer) {
		for _, t := range resp.JSON200.Tasks {
			reason := ""
			if t.Reason != nil {
				reason = *t.Reason
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(t.Id), cell(t.Name), cell(t.State), cell(reason), cell(t.Environment.Runtime), t.CreatedAt.UTC().Format(time.RFC3339))
		}
	})
}

// oneTask is the one task id a verb of the task group takes.
func (c *cli) oneTask(args []string, what string) (string, int, bool) {
	return c.oneArg("task "+what, taskUsage, "task "+what+" takes one task id", args)
}

func (c *cli) taskGet(args []string) int {
	return c.showByID("task get", taskUsage, "task get takes one task id", args, restapi.ClientInterface.GetTask)
}

func (c *cli) taskCancel(args []string) int {
	id, code, ok := c.oneTask(args, "cancel")
	if !ok {
		return code
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.CancelTaskWithResponse(context.Background(), id)
	if err != nil || resp.JSON202 == nil {
		return c.failed(server, err, resp)
	}
	fmt.Fprintf(c.stdout, "%s %s\n", id, cell(resp.JSON202.State))
	return 0
}

func (c *cli) taskArtifacts(args []string) int {
	flags := c.flagSet("agenticctl task artifacts")
	dir := flags.String("download", "", "save every artifact under DIR, by its path")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, taskUsage); done {
		return code
	}
	if flags.NArg() < 1 {
		return c.fail("task artifacts takes one task id")
	}
	id := flags.Arg(0)
	// Flags may follow the id too.
	if code, ok := c.operands(flags, taskUsage, flags.Args()[1:], 0, "task artifacts takes one task id"); !ok {
		return code
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.ListTaskArtifactsWithResponse(context.Background(), id)
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	if *dir == "" {
		return c.table("NAME\tSIZE\tSHA256\tTYPE", func(w io.Writer) {
			for _, a := range resp.JSON200.Artifacts {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", cell(a.Name), a.Size, cell(a.Sha256), cell(a.ContentType))
			}
		})
	}
	for _, a := range resp.JSON200.Artifacts {
		// Names come from the server: nothing may land outside DIR.
		target := filepath.Join(*dir, filepath.FromSlash(a.Name))
		if rel, err := filepath.Rel(*dir, target); err != nil || strings.HasPrefix(rel, "..") || filepath.IsAbs(a.Name) {
			return c.fail("artifact name %q would land outside %s", clip(a.Name), *dir)
		}
		r, err := cl.GetTaskArtifact(context.Background(), id, a.Name)
		if err != nil {
			return c.unreachable(server, err)
		}
		if r.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
			r.Body.Close()
			return c.apiError(r.StatusCode, body)
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil { //nolint:gosec // the operator's own directory
			r.Body.Close()
			return c.fail("%v", err)
		}
		err = writeLocal(target, 0o644, r.Body)
		r.Body.Close()
		if err != nil {
			return c.fail("%s: %v", a.Name, err)
		}
		fmt.Fprintln(c.stdout, target)
	}
	return 0
}

// taskLogs prints the run's output from the task's event stream; without
// -f it stops at the first quiet moment, with -f at the task's end.
func (c *cli) taskLogs(args []string) int {
	flags := c.flagSet("agenticctl task logs")
	follow := flags.Bool("f", false, "follow until the task ends")
	if code, ok := c.operands(flags, taskUsage, args, 1, "task logs takes one task id"); !ok {
		return code
	}
	id := flags.Arg(0)
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := cl.TaskEvents(ctx, id, nil)
	if err != nil {
		return c.unreachable(server, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return c.apiError(resp.StatusCode, body)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	event := ""
	for {
		var line string
		var ok bool
		if *follow {
			line, ok = <-lines
		} else {
			select {
			case line, ok = <-lines:
			case <-time.After(time.Second):
				return 0 // what was kept is out; the task goes on
			}
		}
		if !ok {
			return 0
		}
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "output":
			var o struct {
				Data string `json:"data"`
			}
			if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &o) == nil {
				_, _ = io.WriteString(c.stdout, o.Data)
			}
		case event == "end" && line == "":
			return 0
		}
	}
}
