package main

import (
	"fmt"
	"log/slog"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// provideAuditLog is the audit log, audit.jsonl in the data dir (rotated
// past 256 MiB to audit.1.jsonl); it is fsynced at close.
func provideAuditLog(dir DataDir, log *slog.Logger) (*filestore.AuditLog, func(), error) {
	l, err := filestore.NewAuditLog(filestore.AuditLogConfig{Dir: string(dir), Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("audit log: %w", err)
	}
	return l, func() { _ = l.Close() }, nil
}

// provideCredentialAudit is the agent credentials every use case issues
// and revokes through: each issued or revoked is a line of the audit log.
func provideCredentialAudit(h *filestore.AgentHashes, audit ports.AuditLog, clock ports.Clock, log *slog.Logger) *credentialAudit {
	return newCredentialAudit(h, audit, clock, log)
}
