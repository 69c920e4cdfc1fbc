package agentd

import (
	"net"
	"os"
	"syscall"
)

// serialConn is a character device (a virtio-serial port) used as the one
// connection to the management server.
type serialConn struct {
	*os.File
}

func (serialConn) LocalAddr() net.Addr  { return serialAddr{} }
func (serialConn) RemoteAddr() net.Addr { return serialAddr{} }

type serialAddr struct{}

func (serialAddr) Network() string { return "serial" }
func (serialAddr) String() string  { return "serial" }

// openSerial opens the port non-blocking, so the runtime poller can wake a
// read when the connection is closed.
func openSerial(path string) (net.Conn, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	return serialConn{f}, nil
}
