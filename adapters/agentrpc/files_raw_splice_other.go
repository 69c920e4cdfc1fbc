//go:build !linux

package agentrpc

import (
	"net"
	"sync/atomic"
	"time"
)

// spliceConns: only Linux splices here; the caller copies.
func spliceConns(net.Conn, net.Conn, int64, time.Duration, *atomic.Bool) (int64, bool, error) {
	return 0, false, nil
}
