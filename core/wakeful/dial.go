package wakeful

import (
	"context"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Dialer is a ports.PortDialer whose connections use their environment
// (ports.UsePreview): a dial wakes it when it sleeps, the connection holds
// it until closed (the dialer closes one idle both ways after its idle
// time, so an idle one does not hold it for ever), and each read or write
// that moves bytes touches it, so that its record says when the traffic
// was.
type Dialer struct {
	Dialer ports.PortDialer
	Use    ports.EnvironmentUse
}

var _ ports.PortDialer = Dialer{}

// DialPort implements ports.PortDialer.
func (d Dialer) DialPort(ctx context.Context, agentID string, port uint16) (ports.Conn, error) {
	release, err := d.Use.Use(ctx, agentID, ports.UsePreview)
	if err != nil {
		return nil, err
	}
	c, err := d.Dialer.DialPort(ctx, agentID, port)
	if err != nil {
		release()
		return nil, err
	}
	return &heldConn{Conn: c, agentID: agentID, use: d.Use, release: release}, nil
}

// heldConn holds its environment until it is closed and touches it with
// its traffic: once per read or write, never per byte.
type heldConn struct {
	ports.Conn
	agentID string
	use     ports.EnvironmentUse
	release func()
}

func (c *heldConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.use.Touch(c.agentID, ports.UsePreview)
	}
	return n, err
}

func (c *heldConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.use.Touch(c.agentID, ports.UsePreview)
	}
	return n, err
}

func (c *heldConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
