package main

import (
	"fmt"
	"log/slog"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
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
