package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// tasksBench measures submit → completed of a `command: [true]` task with a
// small repository on host and Docker, beside the sum of its bare steps in
// the same run: a git clone of the repository, the environment's provision
// → first command output (which holds the one exec), and where the time of
// a task goes, by phase.
func tasksBench(bins harness.Binaries) error {
	dataDir, err := os.MkdirTemp("", "agentic-bench-tasks-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	// The repository is in a directory of its own that the server may read
	// itself (as root it reads others as nobody).
	repoDir, err := os.MkdirTemp("", "agentic-bench-repo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(repoDir)
	runtimes := []string{"host"}
	env := []string{"AGENTIC_TASK_REPO_DIRS=" + repoDir}
	var notes []string
	if e, err := harness.StartEngine("docker"); err != nil {
		notes = append(notes, "docker not measured: "+err.Error())
	} else {
		defer e.Stop()
		runtimes = append(runtimes, e.Runtime)
		env = append(env, e.Env...)
	}
	env = append(env, "AGENTIC_RUNTIMES="+strings.Join(runtimes, ","))
	srv, err := harness.Start(bins, harness.Options{DataDir: dataDir, Env: env})
	if err != nil {
		return err
	}
	defer srv.Kill()
	repo := filepath.Join(repoDir, "repo")
	for _, c := range [][]string{{"init", "-q", "-b", "main", repo}} {
		if out, err := exec.Command("git", c...).CombinedOutput(); err != nil {
			return fmt.Errorf("git: %v %s", err, out)
		}
	}
	for i := range 3 {
		_ = os.WriteFile(filepath.Join(repo, fmt.Sprintf("f%d.txt", i)), []byte(strings.Repeat("x", 1000)), 0o644)
	}
	if out, err := exec.Command("sh", "-c", "cd "+repo+" && git add -A && git -c user.name=b -c user.email=b@x commit -q -m base").CombinedOutput(); err != nil {
		return fmt.Errorf("git: %v %s", err, out)
	}

	fmt.Printf("\n## Tasks: submit → completed (`command: {argv: [true]}`, a 3-file repository)\n\n")
	fmt.Println("| measurement | n | p50 | p99 | mean |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, rt := range runtimes {
		n := 20
		if rt == "docker" {
			n = 10
		}
		manifest := "repository: {url: " + repo + "}\ncommand: {argv: [\"true\"]}\nenvironment: {runtime: " + rt + "}\n"
		if _, _, err := runTask(srv, manifest); err != nil { // warm-up
			return fmt.Errorf("%s: %w", rt, err)
		}
		var total, steps []time.Duration
		phases := map[string][]time.Duration{}
		for i := range n {
			d, tk, err := runTask(srv, manifest)
			if err != nil {
				return fmt.Errorf("%s: %w", rt, err)
			}
			total = append(total, d)
			for j := 1; j < len(tk.Phases); j++ {
				p := tk.Phases[j-1]
				phases[p.State] = append(phases[p.State], tk.Phases[j].At.Sub(p.At))
			}
			clone := filepath.Join(dataDir, fmt.Sprintf("clone-%s-%d", rt, i))
			start := time.Now()
			if out, err := exec.Command("git", "clone", "-q", repo, clone).CombinedOutput(); err != nil {
				return fmt.Errorf("git clone: %v %s", err, out)
			}
			cloneTime := time.Since(start)
			_ = os.RemoveAll(clone)
			_, output, err := provisionOnce(srv, rt, fmt.Sprintf("tb-%s-%d", rt, i))
			if err != nil {
				return err
			}
			steps = append(steps, cloneTime+output)
		}
		t, s := summarize(rt+": task submit → completed", total), summarize(rt+": bare steps (git clone + provision → first exec output)", steps)
		for _, r := range []stats{t, s} {
			fmt.Printf("| %s | %d | %s | %s | %s |\n", r.name, r.n, ms(r.p50), ms(r.p99), ms(r.avg))
		}
		for _, ph := range []string{"pending", "staging", "provisioning", "ready", "running", "completing"} {
			r := summarize(rt+": phase "+ph, phases[ph])
			fmt.Printf("| %s | %d | %s | %s | %s |\n", r.name, r.n, ms(r.p50), ms(r.p99), ms(r.avg))
		}
		fmt.Printf("\n%s: orchestration p50 = task p50 − steps p50 = %s (goal < 100 ms)\n\n", rt, ms(t.p50-s.p50))
	}
	for _, n := range notes {
		fmt.Println(n)
	}
	return nil
}

// runTask submits a manifest and polls until it ends; completed or an error.
func runTask(srv *harness.Server, manifest string) (time.Duration, restapi.Task, error) {
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, srv.RESTURL+"/api/v1/tasks", strings.NewReader(manifest))
	req.Header.Set("Authorization", "Bearer "+srv.Token)
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, restapi.Task{}, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var acc restapi.TaskAccepted
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &acc) != nil {
		return 0, restapi.Task{}, fmt.Errorf("submit: %d %s", resp.StatusCode, b)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, srv.RESTURL+"/api/v1/tasks/"+acc.TaskId, nil)
		req.Header.Set("Authorization", "Bearer "+srv.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, restapi.Task{}, err
		}
		var tk restapi.Task
		err = json.NewDecoder(resp.Body).Decode(&tk)
		resp.Body.Close()
		if err != nil {
			return 0, restapi.Task{}, err
		}
		switch tk.State {
		case "completed":
			return time.Since(start), tk, nil
		case "failed", "failed_preserved", "cancelled":
			return 0, tk, fmt.Errorf("task %s: %s", tk.State, func() string {
				if tk.Error != nil {
					return *tk.Error
				}
				return ""
			}())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, restapi.Task{}, fmt.Errorf("task %s did not end", acc.TaskId)
}
