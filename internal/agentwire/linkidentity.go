package agentwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// LinkIdentityHello is what an agent started without an identity
// (AGENT_IDENTITY_FROM_LINK: a VM restored from a saved template) writes on
// its serial link before anything else; the host side of the link answers
// with one LinkIdentity as a JSON line. The template so never holds a
// credential: every clone learns its own from the host that made it.
const LinkIdentityHello = "AGENTIC-IDENTITY?\n"

// MaxLinkIdentityLine bounds the answer a guest reads.
const MaxLinkIdentityLine = 4096

// LinkIdentity is the host side's answer to LinkIdentityHello.
type LinkIdentity struct {
	AgentID string `json:"agent_id"`
	Secret  string `json:"secret"`
	// UnixNano is the host's clock when it answered: a guest resumed from
	// a saved state runs with the clock of the save until told.
	UnixNano int64 `json:"unix_nano"`
}

// EncodeLinkIdentity is the answer line, newline included.
func EncodeLinkIdentity(li LinkIdentity) ([]byte, error) {
	if err := li.check(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(li) //nolint:gosec // the secret is the point: it goes to the guest it belongs to, over its own link
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DecodeLinkIdentity parses an answer line (with or without its newline).
func DecodeLinkIdentity(line []byte) (LinkIdentity, error) {
	var li LinkIdentity
	if len(line) > MaxLinkIdentityLine {
		return li, errors.New("link identity: answer too long")
	}
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimRight(line, "\n")))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&li); err != nil {
		return LinkIdentity{}, fmt.Errorf("link identity: %w", err)
	}
	if dec.More() {
		return LinkIdentity{}, errors.New("link identity: trailing data")
	}
	if err := li.check(); err != nil {
		return LinkIdentity{}, err
	}
	return li, nil
}

func (li LinkIdentity) check() error {
	if !ValidAgentID(li.AgentID) {
		return fmt.Errorf("link identity: agent id %q is not usable", li.AgentID)
	}
	if li.Secret == "" || len(li.Secret) > 512 || strings.ContainsAny(li.Secret, "\r\n\x00") {
		return errors.New("link identity: no usable secret")
	}
	if li.UnixNano < 0 {
		return errors.New("link identity: negative time")
	}
	return nil
}
