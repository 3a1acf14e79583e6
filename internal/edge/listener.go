package edge

import (
	"log/slog"
	"net"
	"sync"
)

// LimitListener caps the connections each client address (AddrKey: an IPv4
// address, an IPv6 /64) may hold open at once to perAddr. A connection past
// the cap is closed as soon as it is accepted, before TLS and without an
// answer: it costs the node nothing, where an answer would cost a handshake
// and a request read. Connections from exempt addresses (trusted proxies,
// which carry many clients) are not counted. perAddr <= 0 returns ln as is.
// The first refusal of an address is logged (at warn level, on log, when
// not nil) until the address is below its cap again.
func LimitListener(ln net.Listener, perAddr int, exempt Proxies, log *slog.Logger) net.Listener {
	if perAddr <= 0 {
		return ln
	}
	return &limitListener{Listener: ln, max: perAddr, exempt: exempt, log: log, open: make(map[string]*addrConns)}
}

type limitListener struct {
	net.Listener
	max    int
	exempt Proxies
	log    *slog.Logger
	mu     sync.Mutex
	open   map[string]*addrConns
}

// addrConns counts one address's open connections.
type addrConns struct {
	n       int
	refused bool // a refusal was logged since the address reached its cap
}

// Accept returns the next connection within its address's cap, closing the
// ones past it.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc, ok := l.admit(c); ok {
			return lc, nil
		}
		_ = c.Close()
	}
}

// admit counts c against its address, or reports that the address is at
// its cap.
func (l *limitListener) admit(c net.Conn) (net.Conn, bool) {
	remote := c.RemoteAddr().String()
	if ip, ok := parseHost(remote); ok && l.exempt.Trusts(ip) {
		return c, true
	}
	key := AddrKey(remote)
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.open[key]
	if a == nil {
		a = &addrConns{}
		l.open[key] = a
	}
	if a.n >= l.max {
		if !a.refused && l.log != nil {
			l.log.Warn("connection cap reached: closing new connections from this address", "addr", key, "max_conns_per_address", l.max)
		}
		a.refused = true
		return nil, false
	}
	a.n++
	return &countedConn{Conn: c, release: func() { l.release(key) }}, true
}

// release uncounts one closed connection of key.
func (l *limitListener) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.open[key]
	if a == nil {
		return
	}
	a.n--
	a.refused = false
	if a.n <= 0 {
		delete(l.open, key)
	}
}

// countedConn uncounts itself once, on its first Close.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// NetConn is the connection counted (as tls.Conn's NetConn): the server
// watches its file descriptor while a long poll waits on it.
func (c *countedConn) NetConn() net.Conn { return c.Conn }

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes the connection when the one it wraps can: the HTTP
// server does so before it closes a connection, so that the client reads the
// last answer before the close.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
