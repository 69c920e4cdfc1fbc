package portsfake_test

import (
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

func TestAuditLogConformance(t *testing.T) {
	open := reopener(portsfake.NewAuditLog)
	portstest.RunAuditLogSuite(t, func(_ *testing.T, dir string) ports.AuditLog { return open(dir) })
}
