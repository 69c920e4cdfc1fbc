package portsfake_test

import (
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

func TestTokenStoreConformance(t *testing.T) {
	open := reopener(portsfake.NewTokens)
	portstest.RunTokenStoreSuite(t, func(_ *testing.T, dir string) ports.TokenStore { return open(dir) })
}
