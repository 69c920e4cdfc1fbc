package inject

import (
	"path"
	"strings"
)

// The rules of a secret's reference, shared by a task manifest's secrets
// and an environment's: each returns what is wrong ("" when nothing is),
// worded to follow the field's path.

// Secret sources: a variable of the server, or a file under its secrets
// directory.
const (
	SourceEnv  = "env"
	SourceFile = "file"
)

// sourcesNot are sources people may expect that this server does not read.
var sourcesNot = map[string]string{"vault": "vault", "aws": "AWS secrets manager", "k8s": "Kubernetes secrets"}

// NameProblem checks a secret's name: the workload's variable.
func NameProblem(name string) string {
	if !isEnvName(name) {
		return "must be an environment variable name"
	}
	return ""
}

// SourceProblem checks a source: env or file.
func SourceProblem(source string) string {
	if what, ok := sourcesNot[source]; ok {
		return what + " is not a source this server reads; use env or file"
	}
	if source != SourceEnv && source != SourceFile {
		return "must be env or file"
	}
	return ""
}

// KeyProblem checks a key: the server's variable, or a relative file name without "..".
func KeyProblem(source, key string) string {
	switch source {
	case SourceEnv:
		if !isEnvName(key) {
			return "must be an environment variable name of the server"
		}
	case SourceFile:
		if !validFile(key) {
			return "must be a file name under the server's secrets directory, without .."
		}
	}
	return ""
}

func validFile(s string) bool {
	if s == "" || strings.HasPrefix(s, "/") || strings.ContainsRune(s, 0) {
		return false
	}
	for _, part := range strings.Split(s, "/") {
		if part == ".." {
			return false
		}
	}
	return path.Clean(s) != "."
}

// Endpoints checks the base-URL variables of one set of secrets: none may
// be a secret's name or name two secrets' endpoints.
type Endpoints struct {
	names map[string]bool
	seen  map[string]string
}

// NewEndpoints checks the base-URL variables of secrets named names.
func NewEndpoints(names []string) *Endpoints {
	e := &Endpoints{names: map[string]bool{}, seen: map[string]string{}}
	for _, n := range names {
		e.names[n] = true
	}
	return e
}

// Problem takes secret's base-URL variable, in order.
func (e *Endpoints) Problem(secret, baseURLEnv string) string {
	if e.names[baseURLEnv] {
		return baseURLEnv + " is a secret's name"
	}
	if other, ok := e.seen[baseURLEnv]; ok {
		return baseURLEnv + " already names the endpoint of " + other
	}
	e.seen[baseURLEnv] = secret
	return ""
}
