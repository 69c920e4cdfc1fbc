package resttest

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Forwards is a fake ports.PortDialer that dials real TCP listeners: a
// port routed for an agent connects to its address on this machine (a real
// socket, so half-closes and backpressure are real); a port given an error
// fails with it; another port of a routed agent is not listening; an agent
// with no route is not connected.
type Forwards struct {
	mu     sync.Mutex
	routes map[string]map[uint16]string
	fail   map[uint16]error
	dials  []string
}

var _ ports.PortDialer = (*Forwards)(nil)

// NewForwards returns a dialer that knows no agent.
func NewForwards() *Forwards {
	return &Forwards{routes: map[string]map[uint16]string{}, fail: map[uint16]error{}}
}

// Route makes agentID's port reach addr (host:port).
func (f *Forwards) Route(agentID string, port uint16, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.routes[agentID] == nil {
		f.routes[agentID] = map[uint16]string{}
	}
	f.routes[agentID][port] = addr
}

// Fail makes every dial of port fail with err.
func (f *Forwards) Fail(port uint16, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[port] = err
}

// Dials are the dials asked so far, as "agent:port".
func (f *Forwards) Dials() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.dials...)
}

// DialPort implements ports.PortDialer.
func (f *Forwards) DialPort(ctx context.Context, agentID string, port uint16) (ports.Conn, error) {
	f.mu.Lock()
	f.dials = append(f.dials, agentID+":"+strconv.Itoa(int(port)))
	err := f.fail[port]
	routes, known := f.routes[agentID]
	addr, routed := routes[port]
	f.mu.Unlock()
	switch {
	case err != nil:
		return nil, err
	case !known:
		return nil, ports.ErrAgentNotConnected
	case !routed:
		return nil, ports.ErrPortNotListening
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, errors.Join(ports.ErrPortNotListening, err)
	}
	return c.(*net.TCPConn), nil
}

// EchoServer is a TCP server on loopback that sends back what it reads;
// when its client ends its write side, it ends its own after the echo (a
// half-close each way), then closes.
type EchoServer struct {
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// NewEchoServer starts one; Close stops it.
func NewEchoServer() (*EchoServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &EchoServer{ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				_ = c.Close()
				return
			}
			s.conns[c] = struct{}{}
			s.wg.Add(1)
			s.mu.Unlock()
			go func() {
				defer s.wg.Done()
				defer func() {
					s.mu.Lock()
					delete(s.conns, c)
					s.mu.Unlock()
					_ = c.Close()
				}()
				if _, err := io.Copy(c, c); err == nil {
					_ = c.(*net.TCPConn).CloseWrite()
				}
				// Hold on until the client closes too.
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return s, nil
}

// Addr is its host:port.
func (s *EchoServer) Addr() string { return s.ln.Addr().String() }

// Close stops it and closes the connections still open.
func (s *EchoServer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}
