// Command fakeagent stands in for agentic-agent in the hostsup tests. It
// records what it was started with into $FAKEAGENT_RECORD_DIR/<id>-<pid>.json,
// prints a line, and runs until SIGTERM.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup/internal/agentrecord"
)

func main() {
	id := flag.String("id", "", "agent id")
	flag.Parse()

	// Behaviours chosen per agent id by the test.
	if os.Getenv("FAKEAGENT_EXIT_AT_ONCE") == *id {
		fmt.Println("fakeagent exiting at once")
		os.Exit(3)
	}
	term := make(chan os.Signal, 1)
	if os.Getenv("FAKEAGENT_IGNORE_TERM") == *id {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	}

	// The secret comes over the pipe named by AGENT_SECRET_FD, as the real
	// agent reads it; one in the environment would be a leak (recorded).
	var secret string
	if fd, err := strconv.Atoi(os.Getenv("AGENT_SECRET_FD")); err == nil {
		f := os.NewFile(uintptr(fd), "secret")
		b, _ := io.ReadAll(f)
		f.Close()
		secret = string(b)
	}
	rec := agentrecord.Record{
		PID:           os.Getpid(),
		FlagID:        *id,
		EnvID:         os.Getenv("AGENT_ID"),
		Server:        os.Getenv("MANAGEMENT_SERVER"),
		Secret:        secret,
		SecretInEnv:   os.Getenv("AGENT_SECRET"),
		Args:          os.Args,
		Extra:         os.Getenv("FAKEAGENT_EXTRA"),
		OperatorToken: os.Getenv("AGENTIC_OPERATOR_TOKEN"),
		SID:           sessionID(),
		PGID:          syscall.Getpgrp(),
	}
	for _, a := range os.Args {
		if secret != "" && strings.Contains(a, secret) {
			rec.SecretInArgv = true
		}
	}
	if dir := os.Getenv("FAKEAGENT_RECORD_DIR"); dir != "" {
		data, _ := json.Marshal(rec)
		name := filepath.Join(dir, fmt.Sprintf("%s-%d.json", *id, rec.PID))
		// Rename so the test never reads a half-written record.
		if err := os.WriteFile(name+".tmp", data, 0o600); err == nil {
			os.Rename(name+".tmp", name)
		}
	}
	fmt.Printf("fakeagent %s pid %d up\n", *id, rec.PID)

	select {
	case <-term:
		fmt.Println("fakeagent got SIGTERM")
	case <-time.After(2 * time.Minute):
		// Never linger for long if a crashed test failed to clean up.
		fmt.Println("fakeagent lifetime over")
	}
}

// sessionID reads field 6 of /proc/self/stat (syscall has no Getsid).
func sessionID() int {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return -1
	}
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 4 {
		return -1
	}
	sid, _ := strconv.Atoi(f[3])
	return sid
}
