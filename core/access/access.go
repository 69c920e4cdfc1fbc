// Package access decides which role may perform which operation of the
// REST API (the operationIds of openapi.yaml), and whether an item is in a
// token's label scope. It is pure: no I/O, no clock.
package access

import "strings"

// The roles a named token can have. The operator token of the server is
// an Admin.
const (
	Viewer   = "viewer"
	Operator = "operator"
	Admin    = "admin"
	Executor = "executor"
)

// Roles lists every role, least powerful first.
var Roles = []string{Viewer, Executor, Operator, Admin}

// ValidRole tells whether role is one of Roles.
func ValidRole(role string) bool {
	for _, r := range Roles {
		if r == role {
			return true
		}
	}
	return false
}

// Kind is what an operation does, which is what the roles are decided on.
type Kind int

const (
	// Read is a GET that changes nothing.
	Read Kind = iota + 1
	// Write changes state (agents, environments, sessions, files, tasks …).
	Write
	// TokenAdmin manages named tokens (and, later, reads the audit log).
	TokenAdmin
)

// Rule is one operation's entry in the table: what it is, and whether an
// executor (the orchestrator's token) may perform it.
type Rule struct {
	Kind     Kind
	Executor bool
}

// Rules is the table, keyed by openapi.yaml's operationIds. An operation
// missing here is refused to every role (and fails the test that reads
// openapi.yaml). Sign-in, sign-out and the probes are not behind a
// token; they are listed so that every operation has a rule.
var Rules = map[string]Rule{
	// Probes and the dashboard's sign-in (no token asked).
	"getHealthz": {Kind: Read},
	"getReadyz":  {Kind: Read},
	"signIn":     {Kind: Read},
	"signOut":    {Kind: Read},

	"watchChanges": {Kind: Read},
	// Who the caller is: every role may ask.
	"getMe": {Kind: Read, Executor: true},

	// Agents, their commands and files.
	"listAgents":        {Kind: Read},
	"getAgent":          {Kind: Read},
	"listAgentPorts":    {Kind: Read},
	"execCommand":       {Kind: Write},
	"startCommand":      {Kind: Write},
	"listFiles":         {Kind: Read},
	"deleteFile":        {Kind: Write},
	"readFile":          {Kind: Read},
	"writeFile":         {Kind: Write},
	"readArchive":       {Kind: Read},
	"writeArchive":      {Kind: Write},
	"getCommand":        {Kind: Read},
	"killCommand":       {Kind: Write},
	"writeCommandStdin": {Kind: Write},
	"resizeCommand":     {Kind: Write},
	"signalCommand":     {Kind: Write},

	// Sessions and missions (aiwg serve's side).
	"dispatchMission":    {Kind: Write, Executor: true},
	"listSessions":       {Kind: Read},
	"listAgentSessions":  {Kind: Read},
	"createSession":      {Kind: Write},
	"getSessionOutput":   {Kind: Read},
	"getSessionActivity": {Kind: Read},
	"getSession":         {Kind: Read},
	"killSession":        {Kind: Write},
	"listMissions":       {Kind: Read, Executor: true},
	"getMission":         {Kind: Read, Executor: true},
	"listHITL":           {Kind: Read, Executor: true},
	"respondHITL":        {Kind: Write, Executor: true},
	"getAIWGStatus":      {Kind: Read, Executor: true},
	"reconnectAIWG":      {Kind: Write},

	// Environments, pools, runtimes, ports.
	"listRuntimes":         {Kind: Read},
	"listEnvironments":     {Kind: Read},
	"createEnvironment":    {Kind: Write},
	"listPools":            {Kind: Read},
	"getPool":              {Kind: Read},
	"putPool":              {Kind: Write},
	"deletePool":           {Kind: Write},
	"getEnvironment":       {Kind: Read},
	"deleteEnvironment":    {Kind: Write},
	"startEnvironment":     {Kind: Write},
	"pauseEnvironment":     {Kind: Write},
	"resumeEnvironment":    {Kind: Write},
	"hibernateEnvironment": {Kind: Write},
	"wakeEnvironment":      {Kind: Write},
	"stopEnvironment":      {Kind: Write},
	"listEnvironmentPorts": {Kind: Read},
	"makePortPublic":       {Kind: Write},
	"makePortPrivate":      {Kind: Write},
	// A forward reaches into the environment: it is not a read.
	"forwardPort": {Kind: Write},

	// Tasks.
	"createTask":        {Kind: Write},
	"listTasks":         {Kind: Read},
	"getTask":           {Kind: Read},
	"cancelTask":        {Kind: Write},
	"taskEvents":        {Kind: Read},
	"listTaskArtifacts": {Kind: Read},
	"getTaskArtifact":   {Kind: Read},

	// Named tokens and the audit log.
	"createToken": {Kind: TokenAdmin},
	"listTokens":  {Kind: TokenAdmin},
	"deleteToken": {Kind: TokenAdmin},
	"listAudit":   {Kind: TokenAdmin},
}

// Allowed tells whether role may perform the operation operationID.
// Unknown roles and unknown operations are refused.
func Allowed(role, operationID string) bool {
	rule, ok := Rules[operationID]
	if !ok {
		return false
	}
	switch role {
	case Admin:
		return true
	case Operator:
		return rule.Kind != TokenAdmin
	case Viewer:
		return rule.Kind == Read
	case Executor:
		return rule.Executor
	}
	return false
}

// InScope tells whether an item carrying itemLabels is in the scope of a
// token with scope: every label of the scope must be on the item with the
// same value. An empty scope covers everything.
func InScope(scope, itemLabels map[string]string) bool {
	for k, v := range scope {
		if got, ok := itemLabels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// EnvironmentLabels finds the labels of the environment named name; ok is
// false when there is no such environment. An agent's id is the name of
// the environment it runs in.
type EnvironmentLabels func(name string) (labels map[string]string, ok bool)

// AgentInScope tells whether the agent agentID is in scope: an empty scope
// covers every agent; otherwise the agent's environment must carry the
// scope. An agent in no environment (a host agent) is outside every
// non-empty scope, whatever labels it declares itself: those are the
// agent's own claim, not set by anyone holding a token. A session, a
// command, a mission and a terminal are in scope when their agent is.
// Both the REST API and the client WebSocket decide with this.
func AgentInScope(scope map[string]string, agentID string, envLabels EnvironmentLabels) bool {
	if len(scope) == 0 {
		return true
	}
	if envLabels == nil {
		return false
	}
	labels, ok := envLabels(agentID)
	return ok && InScope(scope, labels)
}

// WithScope returns the labels an item created by a token with scope
// carries: its own, with the scope's on top (a scoped token cannot create
// an item outside its scope). Neither map is changed.
func WithScope(scope, itemLabels map[string]string) map[string]string {
	if len(scope) == 0 {
		return itemLabels
	}
	out := make(map[string]string, len(scope)+len(itemLabels))
	for k, v := range itemLabels {
		out[k] = v
	}
	for k, v := range scope {
		out[k] = v
	}
	return out
}

// ValidLabel tells whether k=v may be a label of a scope: keys and values
// 1..63 characters of A-Za-z0-9._- starting and ending alphanumeric; a
// key may have one "prefix/" of the same form.
func ValidLabel(k, v string) bool {
	if prefix, name, ok := strings.Cut(k, "/"); ok {
		if !labelPart(prefix) || !labelPart(name) {
			return false
		}
	} else if !labelPart(k) {
		return false
	}
	return labelPart(v)
}

func labelPart(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}
