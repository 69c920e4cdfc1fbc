package agentrpc

import (
	"net"

	"golang.org/x/sys/unix"
)

// tcpBytesMoved is how many bytes c has received and had acknowledged so
// far, as the kernel counts them (TCP_INFO): bytes spliced between two
// sockets never pass through a read of ours.
func tcpBytesMoved(c *net.TCPConn) (uint64, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) //nolint:gosec // a socket's descriptor fits an int
	}); err != nil || gerr != nil {
		return 0, false
	}
	return info.Bytes_received + info.Bytes_acked, true
}
