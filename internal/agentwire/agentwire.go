// Package agentwire converts between the agent link's protobuf messages and
// the ports types, for both ends of the link: the server (adapters/agentrpc)
// and the agent (adapters/agentd). Each mapping is written once here, so the
// two ends cannot drift apart.
package agentwire

import (
	"math"
	"regexp"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

var agentIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidAgentID reports whether id is usable as an agent id (and so as a
// file, container or domain name): both ends of the link hold ids to it.
func ValidAgentID(id string) bool { return agentIDPattern.MatchString(id) }

// CommandRequest is spec as the server sends it to an agent.
func CommandRequest(id string, spec ports.CommandSpec) *sandboxv1.CommandRequest {
	return &sandboxv1.CommandRequest{
		CommandId:         id,
		Command:           spec.Command,
		Args:              spec.Args,
		WorkingDir:        spec.WorkingDir,
		Env:               spec.Env,
		TimeoutSeconds:    timeoutSeconds(spec.Timeout),
		RunAs:             spec.RunAs,
		AllocatePty:       spec.PTY,
		PtyCols:           uint32(spec.Cols),
		PtyRows:           uint32(spec.Rows),
		PtyTerm:           spec.Term,
		SessionId:         spec.SessionID,
		SessionName:       spec.SessionName,
		StdinOpen:         spec.StdinOpen,
		SessionType:       SessionTypeToProto(spec.SessionType),
		Persist:           spec.Persist,
		PermissionPrompts: spec.PermissionPrompts,
		InjectEndpoints:   spec.InjectEndpoints,
	}
}

// CommandSpec is the inverse of CommandRequest (the id is r.GetCommandId()).
func CommandSpec(r *sandboxv1.CommandRequest) ports.CommandSpec {
	return ports.CommandSpec{
		Command:           r.GetCommand(),
		Args:              r.GetArgs(),
		WorkingDir:        r.GetWorkingDir(),
		Env:               r.GetEnv(),
		Timeout:           time.Duration(r.GetTimeoutSeconds()) * time.Second,
		RunAs:             r.GetRunAs(),
		PTY:               r.GetAllocatePty(),
		Cols:              clampU16(r.GetPtyCols()),
		Rows:              clampU16(r.GetPtyRows()),
		Term:              r.GetPtyTerm(),
		StdinOpen:         r.GetStdinOpen(),
		SessionID:         r.GetSessionId(),
		SessionName:       r.GetSessionName(),
		SessionType:       SessionTypeFromProto(r.GetSessionType()),
		Persist:           r.GetPersist(),
		PermissionPrompts: r.GetPermissionPrompts(),
		InjectEndpoints:   r.GetInjectEndpoints(),
	}
}

func clampU16(v uint32) uint16 { return uint16(min(v, 0xffff)) }

func clampI32(v int) int32 { return int32(max(min(v, math.MaxInt32), math.MinInt32)) } //nolint:gosec // clamped

// timeoutSeconds rounds up (a sub-second timeout must not become none) and
// clamps what the wire cannot carry.
func timeoutSeconds(d time.Duration) uint32 {
	s := (d + time.Second - 1) / time.Second
	return uint32(max(min(s, math.MaxUint32), 0)) //nolint:gosec // clamped
}

// CommandResult is r as the agent reports it for command id.
func CommandResult(id string, r ports.CommandResult) *sandboxv1.CommandResult {
	return &sandboxv1.CommandResult{
		CommandId:  id,
		ExitCode:   clampI32(r.ExitCode),
		Error:      r.Error,
		DurationMs: uint64(max(r.Duration/time.Millisecond, 0)), //nolint:gosec // not negative
		Success:    r.Success(),
		TimedOut:   r.TimedOut,
		Signal:     clampI32(r.Signal),
	}
}

// Result is the inverse of CommandResult.
func Result(r *sandboxv1.CommandResult) ports.CommandResult {
	return ports.CommandResult{
		ExitCode: int(r.GetExitCode()),
		Error:    r.GetError(),
		// An agent is untrusted: a duration past int64 must not turn negative.
		Duration: time.Duration(min(r.GetDurationMs(), math.MaxInt64/uint64(time.Millisecond))) * time.Millisecond, //nolint:gosec // clamped
		TimedOut: r.GetTimedOut(),
		Signal:   int(r.GetSignal()),
	}
}

var sessionTypes = map[ports.SessionType]sandboxv1.SessionType{
	ports.SessionInteractive: sandboxv1.SessionType_SESSION_TYPE_INTERACTIVE,
	ports.SessionHeadless:    sandboxv1.SessionType_SESSION_TYPE_HEADLESS,
	ports.SessionBackground:  sandboxv1.SessionType_SESSION_TYPE_BACKGROUND,
}

// SessionTypeToProto maps a session type to the wire enum (unspecified for "").
func SessionTypeToProto(t ports.SessionType) sandboxv1.SessionType {
	return sessionTypes[t] // the zero value is SESSION_TYPE_UNSPECIFIED
}

// SessionTypeFromProto is the inverse of SessionTypeToProto ("" for unspecified).
func SessionTypeFromProto(t sandboxv1.SessionType) ports.SessionType {
	return keyOf(sessionTypes, t, "")
}

var streams = map[ports.OutputStream]sandboxv1.OutputStream{
	ports.StreamStdout: sandboxv1.OutputStream_OUTPUT_STREAM_STDOUT,
	ports.StreamStderr: sandboxv1.OutputStream_OUTPUT_STREAM_STDERR,
	ports.StreamPTY:    sandboxv1.OutputStream_OUTPUT_STREAM_PTY,
}

// StreamToProto maps an output stream to the wire enum (stdout if unknown).
func StreamToProto(s ports.OutputStream) sandboxv1.OutputStream {
	if w, ok := streams[s]; ok {
		return w
	}
	return sandboxv1.OutputStream_OUTPUT_STREAM_STDOUT
}

// StreamFromProto is the inverse of StreamToProto (stdout if unknown).
func StreamFromProto(s sandboxv1.OutputStream) ports.OutputStream {
	return keyOf(streams, s, ports.StreamStdout)
}

var runtimeKinds = map[ports.RuntimeKind]sandboxv1.RuntimeKind{
	ports.KindHost:      sandboxv1.RuntimeKind_RUNTIME_KIND_HOST,
	ports.KindContainer: sandboxv1.RuntimeKind_RUNTIME_KIND_CONTAINER,
	ports.KindVM:        sandboxv1.RuntimeKind_RUNTIME_KIND_VM,
}

// RuntimeKindToProto maps a runtime kind to the wire enum (unspecified if unknown).
func RuntimeKindToProto(k ports.RuntimeKind) sandboxv1.RuntimeKind {
	return runtimeKinds[k]
}

// RuntimeKindFromProto is the inverse of RuntimeKindToProto ("" if unknown).
func RuntimeKindFromProto(k sandboxv1.RuntimeKind) ports.RuntimeKind {
	return keyOf(runtimeKinds, k, "")
}

// keyOf is the key that table maps to wire, else def: each FromProto is
// the inverse of its ToProto table, read backwards.
func keyOf[K, V comparable](table map[K]V, wire V, def K) K {
	for k, v := range table {
		if v == wire {
			return k
		}
	}
	return def
}

// Metrics is an agent's reported load.
func Metrics(m *sandboxv1.Metrics) ports.Metrics {
	return ports.Metrics{
		CPUPercent:       m.GetCpuPercent(),
		MemoryUsedBytes:  m.GetMemoryUsedBytes(),
		MemoryTotalBytes: m.GetMemoryTotalBytes(),
		DiskUsedBytes:    m.GetDiskUsedBytes(),
		DiskTotalBytes:   m.GetDiskTotalBytes(),
		LoadAvg1:         m.GetLoadAvg_1(),
		LoadAvg5:         m.GetLoadAvg_5(),
		LoadAvg15:        m.GetLoadAvg_15(),
	}
}

// SystemInfo is an agent's reported machine.
func SystemInfo(si *sandboxv1.SystemInfo) ports.SystemInfo {
	return ports.SystemInfo{
		OS:          si.GetOs(),
		Kernel:      si.GetKernel(),
		Arch:        si.GetArch(),
		CPUCores:    si.GetCpuCores(),
		MemoryBytes: si.GetMemoryBytes(),
		DiskBytes:   si.GetDiskBytes(),
	}
}
