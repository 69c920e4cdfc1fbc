package agentd

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
)

// identity is who the agent registers as.
type identity struct{ ID, Secret string }

// signIn puts the agent's current credentials on a stream's request (each
// stream, the link's, a transfer's or a tunnel's, authenticates on its
// own) and returns them.
func (a *Agent) signIn(h http.Header) *identity {
	me := a.ident.Load()
	h.Set(agentwire.HeaderAgentID, me.ID)
	h.Set(agentwire.HeaderAgentSecret, me.Secret)
	return me
}

// errRenamed ends a stream whose agent the server renamed: it registers
// again at once under its new identity.
var errRenamed = errors.New("renamed by the management server")

// rename takes the identity the server gave, keeping it in the identity
// file first (when there is one) so that a restart does not bring back
// the old one, whose credential the server is about to revoke.
func (a *Agent) rename(r *sandboxv1.Rename) error {
	next := identity{ID: r.GetAgentId(), Secret: r.GetSecret()}
	if !agentwire.ValidAgentID(next.ID) || next.Secret == "" || strings.ContainsAny(next.Secret, "\r\n") {
		return fmt.Errorf("a rename to %q without a usable id and secret", next.ID)
	}
	if a.cfg.IdentityFile != "" {
		// Not kept, the rename still holds until the agent restarts (then
		// it comes back under its old, revoked credential): better than a
		// caller waiting for an agent that refused.
		if err := WriteIdentityFile(a.cfg.IdentityFile, next.ID, next.Secret); err != nil {
			a.log.Error("the new identity is not kept: a restart of this agent will bring back the old one", "file", a.cfg.IdentityFile, "err", err)
		}
	}
	// The results kept for a reconnect belong to the old identity, whose
	// agent the server retires: the new one reports none of them.
	a.mu.Lock()
	clear(a.finished)
	a.mu.Unlock()
	prev := a.ident.Swap(&next)
	if a.cfg.Runtime == sandboxv1.RuntimeKind_RUNTIME_KIND_VM {
		// The VM is the agent's own machine: it goes by the new name too.
		if err := a.guest.setHostname(next.ID); err != nil {
			a.log.Warn("cannot set the hostname", "err", err)
		}
	}
	a.log.Info("renamed by the management server", "from", prev.ID, "to", next.ID)
	return nil
}

// WriteIdentityFile keeps an identity as AGENT_ID= and AGENT_SECRET= lines,
// readable by the agent's user only.
func WriteIdentityFile(path, id, secret string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return fsatomic.WriteFile(path, fmt.Appendf(nil, "AGENT_ID=%s\nAGENT_SECRET=%s\n", id, secret), 0o600)
}

// ReadIdentityFile returns the identity a rename left in path; ok is false
// when there is none (the agent keeps the one it was started with).
func ReadIdentityFile(path string) (id, secret string, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "AGENT_ID":
			id = v
		case "AGENT_SECRET":
			secret = v
		}
	}
	if !agentwire.ValidAgentID(id) || secret == "" {
		return "", "", false, fmt.Errorf("%s holds no usable identity", path)
	}
	return id, secret, true, nil
}
