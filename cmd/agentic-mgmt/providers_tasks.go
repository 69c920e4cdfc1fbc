package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/gitwork"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/promexport"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/core/task"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// provideTasks is the task use case: records in <data dir>/tasks, staged
// trees and artifacts in <data dir>/task-work, file secrets from
// <data dir>/task-secrets.
func provideTasks(cfg Config, dir DataDir, envs *environment.Service, svc *agentrpc.Service, rts *Runtimes, clock ports.Clock, ids ports.IDGenerator, log *slog.Logger, metrics *promexport.TaskMetrics, ch ports.ChangeNotifier, injected *inject.Registry, w Wakeful) (*task.Service, func(), error) {
	store, err := filestore.NewTaskStore(filepath.Join(string(dir), "tasks"))
	if err != nil {
		return nil, nil, err
	}
	events, err := filestore.NewTaskEventLog(filepath.Join(string(dir), "task-events"))
	if err != nil {
		return nil, nil, err
	}
	ws, err := gitwork.New(filepath.Join(string(dir), "task-work"))
	if err != nil {
		return nil, nil, err
	}
	ws.RepoDirs = cfg.TaskRepoDirs
	runtime := defaultTaskRuntime(cfg, rts)
	// Asked again at each submit: a runtime found after start (make
	// docker) takes tasks naming none as if it had answered at start.
	runtimeOf := func() string {
		if cfg.TaskRuntime != "" {
			return cfg.TaskRuntime
		}
		offered := map[string]bool{}
		for _, c := range envs.Runtimes() { // asks for runtimes found since
			offered[c.Runtime] = true
		}
		return defaultRuntime(func(name string) bool { return offered[name] })
	}
	var hold func(task.State) time.Duration
	if cfg.TaskHold != nil {
		log.Warn("AGENTIC_TEST_TASK_HOLD is set: tasks wait in the states it names (a test hook)", "hold", cfg.TaskHold)
		hold = func(s task.State) time.Duration { return cfg.TaskHold[string(s)] }
	}
	svcTasks := task.New(task.Config{
		Store: store, Workspace: ws, Environments: envs, Files: w.Files, Link: w.Link,
		Secrets: secretSource(dir),
		Clock:   clock, IDs: ids, Logger: log, DefaultRuntime: runtime, DefaultRuntimeOf: runtimeOf, Runtimes: runtimeNames(), ObserveEnd: metrics.ObserveEnd, Permissions: svc, Hold: hold, EventLog: events, Changes: ch,
		Carry:    cfg.Tracing.CarryTrace(),
		Injected: injected, EgressBound: cfg.EgressBound,
	})
	// Loaded before the API serves: a restarted server knows its tasks at once.
	if err := svcTasks.Load(context.Background()); err != nil {
		svcTasks.Close()
		return nil, nil, fmt.Errorf("loading tasks: %w", err)
	}
	return svcTasks, svcTasks.Close, nil
}
