package faulttest

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
)

// proxy is a TCP proxy between nodes and PostgreSQL that cuts every
// connection on demand, and refuses new ones while it is down.
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu    sync.Mutex
	links map[*link]struct{}
	down  bool
	total int // connections accepted while up
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// startProxy listens on a free loopback port and forwards to target
// (host:port). It stops when the test ends.
func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target, links: map[*link]struct{}{}}
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close() // the database is out of reach
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		if p.down { // went down while dialling
			p.mu.Unlock()
			l.close()
			continue
		}
		p.links[l] = struct{}{}
		p.total++
		p.mu.Unlock()
		go p.pipe(l, l.server, l.client)
		go p.pipe(l, l.client, l.server)
	}
}

// pipe copies one direction; when either side ends, the link ends.
func (p *proxy) pipe(l *link, dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// cut closes every connection now; it returns how many there were.
func (p *proxy) cut() int {
	return p.cutWhere(func(*link) bool { return true })
}

// cutWhere closes the connections for which pick is true.
func (p *proxy) cutWhere(pick func(*link) bool) int {
	p.mu.Lock()
	var ls []*link
	for l := range p.links {
		if pick(l) {
			ls = append(ls, l)
		}
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
	return len(ls)
}

// setDown makes the database unreachable through the proxy (cutting every
// connection and refusing new ones), or reachable again.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.cut()
	}
}

// open is the number of connections through the proxy now.
func (p *proxy) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// upstreamPorts are the local ports of the proxy's connections to the
// database (PostgreSQL's pg_stat_activity.client_port), by link.
func (p *proxy) upstreamPorts() map[int]*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[int]*link{}
	for l := range p.links {
		if a, ok := l.server.LocalAddr().(*net.TCPAddr); ok {
			out[a.Port] = l
		}
	}
	return out
}

// via returns the PostgreSQL URL u with its host and port replaced by the
// proxy's, and the database's host:port from u.
func via(t testing.TB, u string, p *proxy) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	pu.Host = p.ln.Addr().String()
	return pu.String()
}

// pgTarget is the host:port of a PostgreSQL URL.
func pgTarget(t testing.TB, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	host, port := pu.Hostname(), pu.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatalf("postgres URL port %q", port)
	}
	return net.JoinHostPort(host, port)
}
