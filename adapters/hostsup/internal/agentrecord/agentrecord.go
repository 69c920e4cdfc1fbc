// Package agentrecord is what the tests' fake agent (testdata/fakeagent)
// writes about how the supervisor started it, and the tests read back: one
// type for both sides.
package agentrecord

// Record is one start of the fake agent, as JSON in
// $FAKEAGENT_RECORD_DIR/<id>-<pid>.json.
type Record struct {
	PID           int
	FlagID        string
	EnvID         string
	Server        string
	Secret        string
	SecretInArgv  bool
	SecretInEnv   string // AGENT_SECRET in the environment: must be empty
	Args          []string
	Extra         string
	OperatorToken string
	SID           int
	PGID          int
}
