package agentd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

// identityFromLink asks the host side of the serial link who this agent
// is, until it answers or ctx ends. The guest was restored from a saved
// template: it also takes the host's clock (the guest's resumed from the
// save) and its new name as hostname.
func (a *Agent) identityFromLink(ctx context.Context) error {
	u, err := url.Parse(a.cfg.ServerURL)
	if err != nil {
		return err
	}
	a.log.Info("waiting for this agent's identity over the agent link")
	for {
		li, err := askLinkIdentity(ctx, u.Path)
		if err == nil {
			a.takeLinkIdentity(li)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.log.Warn("no identity over the agent link yet; asking again", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// askLinkIdentity writes the hello and reads one answer line. The port is
// closed afterwards: the HTTP/2 connection opens it again, and the host
// side sees one byte stream either way.
func askLinkIdentity(ctx context.Context, path string) (agentwire.LinkIdentity, error) {
	conn, err := openSerial(path)
	if err != nil {
		return agentwire.LinkIdentity{}, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := conn.Write([]byte(agentwire.LinkIdentityHello)); err != nil {
		return agentwire.LinkIdentity{}, err
	}
	br := bufio.NewReaderSize(conn, agentwire.MaxLinkIdentityLine)
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return agentwire.LinkIdentity{}, errors.New("the link's answer is too long")
	}
	if err != nil {
		return agentwire.LinkIdentity{}, fmt.Errorf("reading the link's answer: %w", err)
	}
	return agentwire.DecodeLinkIdentity(line)
}

func (a *Agent) takeLinkIdentity(li agentwire.LinkIdentity) {
	if a.cfg.IdentityFile != "" {
		// A restart of the agent must come back as the same agent: there
		// is no other copy of the identity in the guest.
		if err := WriteIdentityFile(a.cfg.IdentityFile, li.AgentID, li.Secret); err != nil {
			a.log.Error("the identity is not kept: a restart of this agent will ask the link again", "file", a.cfg.IdentityFile, "err", err)
		}
	}
	a.ident.Store(&identity{ID: li.AgentID, Secret: li.Secret})
	if li.UnixNano > 0 {
		if err := a.guest.setClock(li.UnixNano); err != nil {
			a.log.Warn("cannot set the clock from the link", "err", err)
		}
	}
	if err := a.guest.setHostname(li.AgentID); err != nil {
		a.log.Warn("cannot set the hostname", "err", err)
	}
	a.log.Info("identity received over the agent link", "id", li.AgentID)
}

// guestSystem is what an identity from the link changes beyond the agent:
// the machine's clock and name (a test puts its own in).
type guestSystem struct {
	setClock    func(unixNano int64) error
	setHostname func(name string) error
	// readRTC reads the machine's real-time clock (clockFromRTC).
	readRTC func() (time.Time, error)
}

var realGuest = guestSystem{
	setClock: func(ns int64) error {
		tv := unix.NsecToTimeval(ns)
		return unix.Settimeofday(&tv)
	},
	setHostname: func(name string) error { return unix.Sethostname([]byte(name)) },
	readRTC:     readRTC,
}
