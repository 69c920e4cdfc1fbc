package rest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/core/task"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Tasks is the task use case behind /api/v1/tasks.
type Tasks interface {
	Check(doc []byte) (task.Manifest, error)
	// SubmitScoped submits for a caller with a label scope: the task (and
	// its environment) carries the scope's labels over the manifest's.
	SubmitScoped(ctx context.Context, doc []byte, idempotencyKey string, scope map[string]string) (task.Submitted, error)
	Get(id string) (ports.TaskRecord, error)
	List(f task.Filter) ([]ports.TaskRecord, string)
	Cancel(ctx context.Context, id string) (ports.TaskRecord, error)
	OpenArtifact(id, name string) (io.ReadCloser, ports.Artifact, error)
	Events(id string, after int64) (events []task.Event, more <-chan struct{}, over bool, err error)
	OpenHITL() []task.HITL
	AnswerHITL(ctx context.Context, id string, allow bool, message string) (task.HITL, error)
}

// createTaskRoute takes YAML or JSON bodies, which the generated decoder
// cannot both take: it is served here, before the strict handler.
const createTaskRoute = http.MethodPost + " /api/v1/tasks"

func (s *Server) tasks() (Tasks, *apiError) {
	if s.d.Tasks == nil {
		return nil, newError(http.StatusServiceUnavailable, "not_supported", "this server runs no tasks")
	}
	return s.d.Tasks, nil
}

// taskError is err as the API answers it: a task sentinel's status and code,
// else err itself (an internal error).
func taskError(err error, id string) error {
	switch {
	case errors.Is(err, ports.ErrTaskNotFound):
		return newError(http.StatusNotFound, "task_not_found", "task %q not found", clip(id))
	case errors.Is(err, ports.ErrTaskConflict):
		return newError(http.StatusConflict, "task_conflict", "%v", err)
	case errors.Is(err, task.ErrInvalidManifest):
		return newError(http.StatusBadRequest, "invalid_manifest", "%v", err)
	case errors.Is(err, ports.ErrArtifactNotFound):
		return newError(http.StatusNotFound, "artifact_not_found", "%v", err)
	case errors.Is(err, ports.ErrStoreUnavailable):
		return newError(http.StatusServiceUnavailable, "store_unavailable", "%v", err)
	}
	return err
}

// task is the task id names, or the API's error.
func (s *Server) task(id string) (ports.TaskRecord, error) {
	t, apiErr := s.tasks()
	if apiErr != nil {
		return ports.TaskRecord{}, apiErr
	}
	r, err := t.Get(id)
	if err != nil {
		return ports.TaskRecord{}, taskError(err, id)
	}
	return r, nil
}

// createTask serves POST /api/v1/tasks.
func (s *Server) createTask(w http.ResponseWriter, r *http.Request) {
	t, apiErr := s.tasks()
	if apiErr != nil {
		_ = apiErr.write(w)
		return
	}
	doc, apiErr := manifestOf(r)
	if apiErr != nil {
		_ = apiErr.write(w)
		return
	}
	if r.URL.Query().Get("dry_run") == "true" {
		m, err := t.Check(doc)
		if err != nil {
			s.responseError(w, r, taskError(err, ""))
			return
		}
		// The labels the task would carry: a scoped token's on top.
		m.Metadata.Labels = access.WithScope(scopeOf(r.Context()), m.Metadata.Labels)
		_ = writeJSON(w, http.StatusOK, normalised(m))
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 128 {
		_ = badRequest("Idempotency-Key: at most 128 bytes").write(w)
		return
	}
	sub, err := t.SubmitScoped(r.Context(), doc, key, scopeOf(r.Context()))
	if err != nil {
		s.responseError(w, r, taskError(err, ""))
		return
	}
	_ = writeJSON(w, http.StatusAccepted, restapi.TaskAccepted{TaskId: sub.Task.ID, State: sub.Task.State})
}

// manifestOf reads the manifest: YAML as the body, or JSON with
// manifest_yaml (a string) or manifest (an object, itself YAML).
func manifestOf(r *http.Request) ([]byte, *apiError) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, newError(http.StatusRequestEntityTooLarge, "body_too_large", "request body is larger than %d bytes", MaxBodyBytes)
		}
		return nil, badRequest("reading the body: %v", err)
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml":
		return body, nil
	case "application/json", "":
		var req struct {
			ManifestYAML *string         `json:"manifest_yaml"`
			Manifest     json.RawMessage `json:"manifest"`
		}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, newError(http.StatusBadRequest, "invalid_json", "want {\"manifest_yaml\": \"…\"} or {\"manifest\": {…}}: %v", err)
		}
		switch {
		case req.ManifestYAML != nil && req.Manifest != nil:
			return nil, badRequest("give manifest_yaml or manifest, not both")
		case req.ManifestYAML != nil:
			return []byte(*req.ManifestYAML), nil
		case len(req.Manifest) > 0 && string(req.Manifest) != "null":
			return req.Manifest, nil // JSON is YAML
		}
		return nil, badRequest("give manifest_yaml or manifest")
	}
	return nil, newError(http.StatusUnsupportedMediaType, "invalid_request", "Content-Type %q: send application/yaml or application/json", clip(mt))
}

// normalised is a manifest as the server understood it, defaults filled in.
func normalised(m task.Manifest) map[string]any {
	out := map[string]any{"version": m.Version, "kind": m.Kind,
		"metadata": map[string]any{"name": m.Metadata.Name, "id": m.Metadata.ID, "labels": m.Metadata.Labels},
		"environment": map[string]any{"runtime": m.Environment.Runtime, "image": m.Environment.Image, "cpus": m.Environment.CPUs,
			"memory_mb": m.Environment.MemoryMB, "disk_gb": m.Environment.DiskGB, "network_mode": m.Environment.NetworkMode,
			"allowed_hosts": m.Environment.AllowedHosts},
		"lifecycle": map[string]any{"timeout": m.Lifecycle.Timeout.String(), "idle_timeout": durationOrEmpty(m.Lifecycle.IdleTimeout),
			"failure_action": m.Lifecycle.FailureAction, "preserve_for": m.Lifecycle.PreserveFor.String(),
			"artifact_patterns": m.Lifecycle.ArtifactPatterns},
	}
	if r := m.Repository; r != nil {
		out["repository"] = map[string]any{"url": r.URL, "branch": r.Branch, "commit": r.Commit, "subpath": r.Subpath}
	}
	if c := m.Claude; c != nil {
		out["claude"] = map[string]any{"prompt": c.Prompt, "model": c.Model, "max_turns": c.MaxTurns, "allowed_tools": c.AllowedTools,
			"skip_permissions": c.SkipPermissions}
	}
	if c := m.Command; c != nil {
		out["command"] = map[string]any{"argv": c.Argv}
	}
	secrets := []map[string]any{}
	for _, sec := range m.Secrets {
		secrets = append(secrets, map[string]any{"name": sec.Name, "source": sec.Source, "key": sec.Key, "required": sec.Required})
	}
	out["secrets"] = secrets
	return out
}

func durationOrEmpty(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// CreateTask implements restapi.StrictServerInterface; createTask serves the
// route before the strict handler is reached.
func (s *Server) CreateTask(context.Context, restapi.CreateTaskRequestObject) (restapi.CreateTaskResponseObject, error) {
	return nil, errors.New("POST /api/v1/tasks is served by createTask")
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func toTask(r ports.TaskRecord) restapi.Task {
	out := restapi.Task{
		Id: r.ID, Name: r.Name, Labels: r.Labels, State: r.State, Reason: nonEmpty(r.Reason), Error: nonEmpty(r.Error),
		CreatedAt: r.CreatedAt.UTC(), StateChangedAt: r.StateChangedAt.UTC(), StartedAt: optTime(r.StartedAt), FinishedAt: optTime(r.FinishedAt),
		PreserveUntil: optTime(r.PreserveUntil), AgentId: nonEmpty(r.AgentID), SessionId: nonEmpty(r.CommandID), ExitCode: r.ExitCode,
		BaseCommit: nonEmpty(r.BaseCommit),
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Environment.Name, out.Environment.Runtime = r.Environment.Name, r.Environment.Runtime
	for _, p := range r.Phases {
		out.Phases = append(out.Phases, struct {
			At    time.Time `json:"at"`
			State string    `json:"state"`
		}{p.At.UTC(), p.State})
	}
	p := r.Progress
	out.Progress.OutputBytes, out.Progress.ToolCalls, out.Progress.Turns = p.OutputBytes, p.ToolCalls, p.Turns
	out.Progress.CostUsd = float32(p.CostUSD)
	out.Progress.CurrentTool, out.Progress.Activity, out.Progress.LastActivityAt = nonEmpty(p.CurrentTool), nonEmpty(p.Activity), optTime(p.LastActivityAt)
	if u := r.Usage; u != (ports.TaskUsage{}) {
		v := alloc(&out.Usage)
		v.Requests, v.BytesSent, v.BytesReceived, v.CostUsd = u.Requests, u.BytesSent, u.BytesReceived, u.CostUSD
		v.InputTokens, v.OutputTokens = u.InputTokens, u.OutputTokens
		v.CacheCreationInputTokens, v.CacheReadInputTokens = u.CacheCreationInputTokens, u.CacheReadInputTokens
	}
	return out
}

// alloc points *p at a new zero T and returns it: for the generated
// schemas' unnamed structs.
func alloc[T any](p **T) *T {
	*p = new(T)
	return *p
}

// GetTask implements restapi.StrictServerInterface.
func (s *Server) GetTask(_ context.Context, req restapi.GetTaskRequestObject) (restapi.GetTaskResponseObject, error) {
	r, err := s.task(req.TaskId)
	if err != nil {
		return nil, err
	}
	return restapi.GetTask200JSONResponse(toTask(r)), nil
}

// ListTasks implements restapi.StrictServerInterface.
func (s *Server) ListTasks(ctx context.Context, req restapi.ListTasksRequestObject) (restapi.ListTasksResponseObject, error) {
	t, apiErr := s.tasks()
	if apiErr != nil {
		return nil, apiErr
	}
	f := task.Filter{Labels: map[string]string{}}
	if req.Params.State != nil {
		for _, st := range strings.Split(*req.Params.State, ",") {
			if st = strings.TrimSpace(st); st != "" {
				if !task.State(st).Valid() {
					return nil, badRequest("state %q: not a task state", clip(st))
				}
				f.States = append(f.States, st)
			}
		}
	}
	if req.Params.Label != nil {
		for _, l := range *req.Params.Label {
			k, v, ok := strings.Cut(l, "=")
			if !ok || k == "" {
				return nil, badRequest("label %q: want key=value", clip(l))
			}
			f.Labels[k] = v
		}
	}
	if req.Params.Limit != nil {
		if *req.Params.Limit < 1 || *req.Params.Limit > 500 {
			return nil, badRequest("limit: 1 to 500")
		}
		f.Limit = *req.Params.Limit
	}
	if req.Params.Cursor != nil {
		f.After = *req.Params.Cursor
	}
	// A scoped token lists only its scope's tasks: the scope joins the
	// filter (a filter naming another value of a scope's key finds none).
	for k, v := range scopeOf(ctx) {
		if got, ok := f.Labels[k]; ok && got != v {
			return restapi.ListTasks200JSONResponse{Tasks: []restapi.Task{}}, nil
		}
		f.Labels[k] = v
	}
	recs, next := t.List(f)
	out := restapi.ListTasks200JSONResponse{Tasks: make([]restapi.Task, 0, len(recs)), NextCursor: nonEmpty(next)}
	for _, r := range recs {
		out.Tasks = append(out.Tasks, toTask(r))
	}
	return out, nil
}

// CancelTask implements restapi.StrictServerInterface.
func (s *Server) CancelTask(ctx context.Context, req restapi.CancelTaskRequestObject) (restapi.CancelTaskResponseObject, error) {
	t, apiErr := s.tasks()
	if apiErr != nil {
		return nil, apiErr
	}
	r, err := t.Cancel(ctx, req.TaskId)
	if err != nil {
		return nil, taskError(err, req.TaskId)
	}
	return restapi.CancelTask202JSONResponse(toTask(r)), nil
}

// ListTaskArtifacts implements restapi.StrictServerInterface.
func (s *Server) ListTaskArtifacts(_ context.Context, req restapi.ListTaskArtifactsRequestObject) (restapi.ListTaskArtifactsResponseObject, error) {
	r, err := s.task(req.TaskId)
	if err != nil {
		return nil, err
	}
	out := restapi.ListTaskArtifacts200JSONResponse{Artifacts: []restapi.Artifact{}}
	for _, a := range r.Artifacts {
		out.Artifacts = append(out.Artifacts, restapi.Artifact{Name: a.Name, Size: a.Size, Sha256: a.SHA256, ContentType: a.ContentType})
	}
	return out, nil
}

// GetTaskArtifact implements restapi.StrictServerInterface.
func (s *Server) GetTaskArtifact(_ context.Context, req restapi.GetTaskArtifactRequestObject) (restapi.GetTaskArtifactResponseObject, error) {
	t, apiErr := s.tasks()
	if apiErr != nil {
		return nil, apiErr
	}
	rc, a, err := t.OpenArtifact(req.TaskId, req.Name)
	if err != nil {
		return nil, taskError(err, req.TaskId)
	}
	return restapi.GetTaskArtifact200ApplicationoctetStreamResponse{Body: rc, ContentLength: a.Size}, nil
}

// taskEventsRoute streams; the strict handler cannot.
const taskEventsRoute = http.MethodGet + " /api/v1/tasks/{task_id}/events"

// TaskEvents implements restapi.StrictServerInterface; taskEvents serves
// the route before the strict handler is reached.
func (s *Server) TaskEvents(context.Context, restapi.TaskEventsRequestObject) (restapi.TaskEventsResponseObject, error) {
	return nil, errors.New("GET /api/v1/tasks/{task_id}/events is served by taskEvents")
}

// taskEvents serves a task's events as SSE until its end event.
func (s *Server) taskEvents(w http.ResponseWriter, r *http.Request) {
	t, apiErr := s.tasks()
	if apiErr != nil {
		_ = apiErr.write(w)
		return
	}
	id := r.PathValue("task_id")
	var after int64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			_ = badRequest("Last-Event-ID: a non-negative integer").write(w)
			return
		}
		after = n
	}
	events, more, over, err := t.Events(id, after)
	if err != nil {
		s.responseError(w, r, taskError(err, id))
		return
	}
	rc := startSSE(w)
	for {
		for _, ev := range events {
			data := ev.Data
			if rec, ok := data.(ports.TaskRecord); ok {
				data = toTask(rec)
			}
			if writeSSE(w, ev.Type, strconv.FormatInt(ev.ID, 10), data) != nil {
				return
			}
			after = ev.ID
			if ev.Type == task.EventEnd {
				_ = rc.Flush()
				return
			}
		}
		if rc.Flush() != nil || over {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-more:
		}
		if events, more, over, err = t.Events(id, after); err != nil {
			return
		}
	}
}

func taskHITL(h task.HITL) restapi.HITLRequest {
	return restapi.HITLRequest{
		HitlId: h.ID, TaskId: &h.TaskID, AgentId: nonEmpty(h.AgentID), ToolName: &h.ToolName, ToolInput: &h.InputJSON,
		Prompt:  "claude asks to use " + h.ToolName,
		Context: h.InputJSON, CreatedAt: h.CreatedAt.UTC(),
	}
}

// answerTaskHITL answers a task's permission question; ok is false when
// the id is none of the tasks' (a mission's, or nothing).
func (s *Server) answerTaskHITL(ctx context.Context, req restapi.RespondHITLRequestObject, subject string) (restapi.RespondHITLResponseObject, *apiError, bool) {
	if s.d.Tasks == nil {
		return nil, nil, false
	}
	open := false
	for _, h := range s.d.Tasks.OpenHITL() {
		open = open || h.ID == req.HitlId
	}
	if !open {
		return nil, nil, false
	}
	decision := ""
	if req.Body.Decision != nil {
		decision = string(*req.Body.Decision)
	}
	if decision != "allow" && decision != "deny" {
		return nil, badRequest("%s: a task's permission needs decision allow or deny", subject), true
	}
	h, err := s.d.Tasks.AnswerHITL(ctx, req.HitlId, decision == "allow", req.Body.Text)
	switch {
	case errors.Is(err, ports.ErrHITLNotFound):
		return nil, newError(http.StatusConflict, "hitl_not_open", "%s: already answered, or its task has ended", subject), true
	case err != nil:
		return nil, portError(err, subject), true
	}
	s.log.InfoContext(ctx, "rest: task permission answered by operator", "hitl_id", req.HitlId, "task_id", h.TaskID, "decision", decision)
	return restapi.RespondHITL200JSONResponse{HitlId: req.HitlId, TaskId: &h.TaskID, Decision: &decision}, nil, true
}
