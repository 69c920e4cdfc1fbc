package main

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// stateDirName is `make run`'s data dir, in the clone: agenticctl run in
// the clone or below finds it as git finds .git.
const stateDirName = ".state"

// restURLFile is where agentic-mgmt leaves its REST URL in its data dir.
const restURLFile = "rest-url"

// getwd is a variable so tests can start the search elsewhere.
var getwd = os.Getwd

// stateDir is the nearest `.state` holding an operator-token, in the
// working directory or one above it.
func stateDir() (string, bool) {
	dir, err := getwd()
	if err != nil {
		return "", false
	}
	for {
		d := filepath.Join(dir, stateDirName)
		if fi, err := os.Stat(filepath.Join(d, "operator-token")); err == nil && fi.Mode().IsRegular() {
			return d, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// discoveredServer is the REST URL the server of the data dir left there
// (rest-url), or "" when there is none that is an http(s) URL.
func discoveredServer(env func(string) string) string {
	dir, err := dataDir(env)
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, restURLFile))
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return s
}
