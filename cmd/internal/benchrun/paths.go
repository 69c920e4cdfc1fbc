package main

import (
	"fmt"
	"sync"
)

// The byte paths of issue 33, each beside its floor from the same run:
// the parts note their ratios as they measure them, and a run ends with
// the table, so one `make bench` fills it in.
type bytePath struct {
	key, path string
	// atLeast: the goal is a ratio to reach (throughput against a floor);
	// otherwise one to stay under (time against a floor).
	atLeast bool
	goal    float64
}

var bytePaths = []bytePath{
	{"exec-true", "exec `true` round trip / fork+exec", false, 1.5},
	{"exec-1mib", "1 MiB output via REST exec / local `cat`", true, 0.5},
	{"pty-tmux", "tmux-kept PTY → WebSocket viewer / local PTY", true, 0.7},
	{"echo-tmux", "keystroke echo via tmux-kept shell / `ssh -tt`", false, 1.5},
	{"egress", "HTTPS through the egress tunnel / direct", true, 0.6},
	{"files-up", "files 1 GiB up (REST PUT) / `scp` up", true, 2},
	{"files-down", "files 1 GiB down (REST GET) / `scp` down", true, 2},
}

// byteParts are the parts after exec that measure a byte path
// (-only paths runs exec and these).
var byteParts = []string{"term", "files", "egress"}

type pathResult struct {
	now, floor string
	ratio      float64
}

var (
	pathsMu     sync.Mutex
	pathResults = map[string]pathResult{}
)

// notePath records a byte path's measurement (now), its floor's and their
// ratio, as the goal of key reads it.
func notePath(key, now, floor string, ratio float64) {
	pathsMu.Lock()
	defer pathsMu.Unlock()
	pathResults[key] = pathResult{now: now, floor: floor, ratio: ratio}
}

// printBytePaths prints the table of the paths this run measured.
func printBytePaths() {
	pathsMu.Lock()
	defer pathsMu.Unlock()
	if len(pathResults) == 0 {
		return
	}
	fmt.Printf("\n## Byte paths (issue 33), this run\n\n")
	fmt.Println("| path | now | floor in the same run | ratio | goal |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, p := range bytePaths {
		r, ok := pathResults[p.key]
		if !ok {
			continue
		}
		met := r.ratio <= p.goal
		goal := fmt.Sprintf("≤ %.1f×", p.goal)
		if p.atLeast {
			met, goal = r.ratio >= p.goal, fmt.Sprintf("≥ %.1f×", p.goal)
		}
		verdict := "not met"
		if met {
			verdict = "met"
		}
		fmt.Printf("| %s | %s | %s | %.2f× | %s — %s |\n", p.path, r.now, r.floor, r.ratio, goal, verdict)
	}
}
