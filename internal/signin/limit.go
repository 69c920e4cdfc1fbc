package signin

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"time"
)

// Failed sign-ins are limited per client address: after MaxFailures
// within FailureWindow, a sign-in from that address is refused (429) until
// the oldest of them is FailureWindow old. The limiter remembers at most
// MaxAddresses addresses, the one that failed least recently forgotten
// first.
const (
	MaxFailures   = 5
	FailureWindow = time.Minute
	MaxAddresses  = 10_000
)

// Limiter counts failed sign-ins per client address, in memory.
type Limiter struct {
	mu    sync.Mutex
	max   int
	byKey map[string]*list.Element
	// lru holds *failures, the most recently failed at the front.
	lru *list.List
}

type failures struct {
	key string
	at  []time.Time // within the window, oldest first; at most MaxFailures
}

// NewLimiter returns an empty limiter.
func NewLimiter() *Limiter {
	return &Limiter{max: MaxAddresses, byKey: map[string]*list.Element{}, lru: list.New()}
}

// ClientKey is what failures are counted by: the client's IP address (an
// IPv6 address by its /64, which one host usually holds whole). Headers
// such as X-Forwarded-For are not trusted.
func ClientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return host
	case ip.To4() != nil:
		return ip.To4().String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// live drops f's failures older than the window at now.
func (f *failures) live(now time.Time) {
	i := 0
	for i < len(f.at) && !now.Before(f.at[i].Add(FailureWindow)) {
		i++
	}
	f.at = f.at[i:]
}

// Allow reports whether key may try to sign in at now; if not, how long
// until it may.
func (l *Limiter) Allow(key string, now time.Time) (ok bool, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, found := l.byKey[key]
	if !found {
		return true, 0
	}
	f := e.Value.(*failures)
	f.live(now)
	if len(f.at) < MaxFailures {
		return true, 0
	}
	return false, f.at[0].Add(FailureWindow).Sub(now)
}

// Failed counts a failed sign-in of key at now.
func (l *Limiter) Failed(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, found := l.byKey[key]
	if !found {
		if l.lru.Len() >= l.max {
			old := l.lru.Back()
			l.lru.Remove(old)
			delete(l.byKey, old.Value.(*failures).key)
		}
		e = l.lru.PushFront(&failures{key: key})
		l.byKey[key] = e
	}
	l.lru.MoveToFront(e)
	f := e.Value.(*failures)
	f.live(now)
	f.at = append(f.at, now)
	if len(f.at) > MaxFailures {
		f.at = f.at[len(f.at)-MaxFailures:]
	}
}

// Succeeded forgets key's failures (and only key's).
func (l *Limiter) Succeeded(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, found := l.byKey[key]; found {
		l.lru.Remove(e)
		delete(l.byKey, key)
	}
}
