package ports

import "errors"

// MaxPublicPortsPerEnvironment bounds the public marks one environment may
// hold at once (expired marks do not count): a store refuses one more with
// ErrTooManyPublicPorts.
const MaxPublicPortsPerEnvironment = 64

// ErrTooManyPublicPorts: the environment already has
// MaxPublicPortsPerEnvironment live public marks (REST answers 409
// too_many_public_ports).
var ErrTooManyPublicPorts = errors.New("too many public ports in this environment")
