package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

var (
	sleepN      = flag.Int("sleep-n", 3, "hibernate/wake rounds per runtime (sleep)")
	sleepDocker = flag.String("sleep-docker", "auto", "the docker engine of sleep: criu (a dockerd that checkpoints: hibernate memory), plain (hibernate filesystem), auto (criu where make test-env built it)")
)

// sleepRow is one runtime's sleep and wake, medians of its rounds.
type sleepRow struct {
	runtime               string
	cold, hibernate, wake []time.Duration
	saved                 []int64
	rounds, memoryMB      int
	mode                  string
}

// sleepBench measures, per runtime that can hibernate (a 512 MiB VM under
// TCG, a container), in one run: a cold create → first output of an exec,
// then hibernate (its time and the saved state's size on disk) and a wake
// by the same exec → its output.
func sleepBench(bins harness.Binaries) error {
	dataDir, err := os.MkdirTemp("", "agentic-bench-sleep-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	var runtimes, env, notes []string
	startDocker := func() (harness.Engine, error) { return harness.StartEngine("docker") }
	dockerMode := "filesystem"
	if _, _, err := harness.CheckpointDockerd(); *sleepDocker == "criu" || *sleepDocker == "auto" && err == nil {
		startDocker, dockerMode = harness.StartCheckpointDockerEngine, "memory"
	}
	if e, err := startDocker(); err != nil {
		notes = append(notes, "docker not measured: "+err.Error())
	} else {
		defer e.Stop()
		runtimes = append(runtimes, e.Runtime)
		env = append(env, e.Env...)
	}
	if _, err := os.Stat("/var/run/libvirt/libvirt-sock"); err != nil {
		notes = append(notes, "libvirt not measured: no libvirtd (scripts/libvirt-test-env.sh starts one)")
	} else if _, err := os.Stat(filepath.Join(*vmDir, "initrd.img")); err != nil {
		notes = append(notes, "libvirt not measured: no VM image (make vm-image)")
	} else {
		abs, _ := filepath.Abs(*vmDir)
		runtimes = append(runtimes, "libvirt")
		env = append(env, "AGENTIC_VM_IMAGE_DIR="+abs, "AGENTIC_LIBVIRT_ACCEL=tcg")
		// QEMU runs as libvirt-qemu and must reach the data dir's vms/.
		if err := os.Chmod(dataDir, 0o711); err != nil {
			return err
		}
	}
	if len(runtimes) == 0 {
		return errors.New(strings.Join(notes, "; "))
	}
	env = append(env, "AGENTIC_RUNTIMES="+strings.Join(runtimes, ","))
	srv, err := harness.Start(bins, harness.Options{DataDir: dataDir, Env: env})
	if err != nil {
		return err
	}
	defer srv.Kill()

	var rows []sleepRow
	for _, rt := range runtimes {
		if rt == "docker" {
			// The checkpoint probe runs in the background after start.
			if err := waitHibernateMode(srv, rt, dockerMode); err != nil {
				return err
			}
		}
		row := sleepRow{runtime: rt, memoryMB: 512, rounds: *sleepN}
		// The first environment pays one-time costs (an image built on
		// first use): not measured.
		if _, _, err := provisionOnce(srv, rt, rt+"-sleep-first"); err != nil {
			return fmt.Errorf("%s: %w", rt, err)
		}
		for i := range *sleepN {
			name := fmt.Sprintf("%s-sleep-%d", rt, i)
			var then error
			_, cold, err := provisionOnceHook(srv, rt, name, map[string]any{"resources": map[string]any{"memory_mb": row.memoryMB}}, func() {
				then = sleepAndWake(srv, name, &row)
			})
			if err = errors.Join(err, then); err != nil {
				return fmt.Errorf("%s: %w", rt, err)
			}
			row.cold = append(row.cold, cold)
		}
		rows = append(rows, row)
	}
	fmt.Println("\n| sleep and wake | mode | n | cold create → first output | hibernate | saved on disk | wake → first output | wake / cold |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rows {
		cold, wake := median(r.cold), median(r.wake)
		fmt.Printf("| %s, %d MiB | %s | %d | %s | %s | %.1f MiB | %s | %.2f× |\n", r.runtime, r.memoryMB, r.mode, r.rounds,
			ms(cold), ms(median(r.hibernate)), float64(medianInt(r.saved))/(1<<20), ms(wake), float64(wake)/float64(cold))
	}
	for _, n := range notes {
		fmt.Println(n)
	}
	return nil
}

// sleepAndWake hibernates name, then times an exec that wakes it.
func sleepAndWake(srv *harness.Server, name string, row *sleepRow) error {
	start := time.Now()
	code, body, err := restCall(srv, http.MethodPost, "/api/v1/environments/"+name+"/hibernate", nil)
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("hibernate %s: %d %s %v", name, code, body, err)
	}
	row.hibernate = append(row.hibernate, time.Since(start))
	var e struct {
		State      string `json:"state"`
		SavedBytes int64  `json:"saved_bytes"`
		Hibernate  string `json:"hibernate"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.State != "hibernated" {
		return fmt.Errorf("hibernate %s: %s %v", name, body, err)
	}
	row.saved, row.mode = append(row.saved, e.SavedBytes), e.Hibernate
	start = time.Now()
	code, body, err = restCall(srv, http.MethodPost, "/api/v1/agents/"+name+"/exec", map[string]any{"command": "echo", "args": []string{"awake"}})
	if err != nil || code != http.StatusOK || !bytes.Contains(body, []byte("awake")) {
		return fmt.Errorf("wake %s by an exec: %d %s %v", name, code, body, err)
	}
	row.wake = append(row.wake, time.Since(start))
	return nil
}

// median is the p50 summarize reports.
func median(d []time.Duration) time.Duration { return summarize("", d).p50 }

func medianInt(v []int64) int64 {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x)
	}
	return int64(median(d))
}

// waitHibernateMode waits until runtime rt's capability says hibernate
// want (a minute at most).
func waitHibernateMode(srv *harness.Server, rt, want string) error {
	got := ""
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		code, body, err := restCall(srv, http.MethodGet, "/api/v1/runtimes", nil)
		if err != nil || code != http.StatusOK {
			continue
		}
		var list struct {
			Runtimes []struct {
				Runtime   string `json:"runtime"`
				Hibernate string `json:"hibernate"`
			} `json:"runtimes"`
		}
		if json.Unmarshal(body, &list) != nil {
			continue
		}
		for _, r := range list.Runtimes {
			if r.Runtime == rt {
				got = r.Hibernate
			}
		}
		if got == want {
			return nil
		}
	}
	return fmt.Errorf("%s: hibernate %q, want %q (see the server's log)", rt, got, want)
}
