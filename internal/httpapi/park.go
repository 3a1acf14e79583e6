package httpapi

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// Parking lets long polls over HTTP/1.1 wait without holding a goroutine,
// its stack or net/http's buffers: a receive that finds nothing and may
// wait takes its connection from net/http (a hijack) and parks it. A parked
// poll is a small record: the connection, its wake-up registration with the
// queue's notifier, a timer for its deadline, and the connection's file
// descriptor in an epoll set that notices the client going away. When one
// of these fires, a goroutine looks at the store again and writes the
// answer itself, byte for byte an HTTP/1.1 response with the headers the
// request had been given, then keeps the connection, still without a
// goroutine, until the client sends its next request: the connection goes
// back to the HTTP server then (through the listener Listen wraps), as a
// connection kept alive would.
//
// What does not park waits in its handler as before: HTTP/2 (its streams
// share a connection), HTTP/1.0 or a request asking to close its
// connection, HEAD, and every poll where no epoll is available.
type Parking struct {
	idle time.Duration
	w    *watcher // nil: parking is off

	mu     sync.Mutex
	conns  map[*parkedConn]struct{}
	closed bool
	wg     sync.WaitGroup

	back     chan net.Conn // connections handed back to the HTTP server
	done     chan struct{} // closed once parking stops: nothing goes back
	doneOnce sync.Once
}

// NewParking starts parking; idle is how long an answered connection may
// wait for its next request (the HTTP server's idle timeout). Where the
// system offers no epoll, parking is off and polls wait in their handlers.
func NewParking(idle time.Duration, log *slog.Logger) *Parking {
	if log == nil {
		log = slog.Default()
	}
	p := &Parking{idle: idle, conns: make(map[*parkedConn]struct{}), back: make(chan net.Conn), done: make(chan struct{})}
	w, err := newWatcher()
	if err != nil {
		log.Info("long polls wait in their handlers: no epoll here", "err", err)
		return p
	}
	p.w = w
	return p
}

// enabled reports whether a poll may park now.
func (p *Parking) enabled() bool {
	if p == nil || p.w == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed
}

// register counts c among the parked connections; false once Close began.
func (p *Parking) register(c *parkedConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	return true
}

func (p *Parking) forget(c *parkedConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	p.wg.Done()
}

// Close answers every parked poll at once with no messages and closes its
// connection, as a server that stops does, closes the connections waiting
// for their next request, and waits (up to ctx) until they are done.
func (p *Parking) Close(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	p.closed = true
	all := make([]*parkedConn, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	p.stopBack()
	for _, c := range all {
		c.signal(evStop)
	}
	finished := make(chan struct{})
	go func() { p.wg.Wait(); close(finished) }()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if p.w != nil {
		p.w.close()
	}
	return err
}

func (p *Parking) stopBack() { p.doneOnce.Do(func() { close(p.done) }) }

// Listen wraps the HTTP server's listener: Accept also returns the
// connections parking hands back.
func (p *Parking) Listen(ln net.Listener) net.Listener {
	return &parkingListener{Listener: ln, p: p, accepted: make(chan accepted)}
}

type parkingListener struct {
	net.Listener
	p        *Parking
	once     sync.Once
	accepted chan accepted
}

type accepted struct {
	c   net.Conn
	err error
}

func (l *parkingListener) Accept() (net.Conn, error) {
	l.once.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.p.back:
		return c, nil
	case a := <-l.accepted:
		return a.c, a.err
	}
}

// acceptLoop accepts new connections until the listener fails for good.
func (l *parkingListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		l.accepted <- accepted{c, err}
		// The HTTP server retries what says it is temporary, and stops
		// at anything else.
		if te, ok := err.(interface{ Temporary() bool }); err != nil && (!ok || !te.Temporary()) {
			return
		}
	}
}

// Close closes the listener; connections parking would hand back are
// closed instead from then on.
func (l *parkingListener) Close() error {
	l.p.stopBack()
	return l.Listener.Close()
}

// What a parked connection is told.
const (
	evWake     uint8 = 1 << iota // the queue's notifier picked the poll
	evDeadline                   // the poll's wait ran out
	evReadable                   // the client sent something or went away
	evIdleOver                   // an answered connection's next request did not come in time
	evStop                       // the server stops
)

// parkLookTimeout bounds one look at the store for a parked poll, when the
// node sets no StoreTimeout.
const parkLookTimeout = 30 * time.Second

// parkWriteTimeout bounds writing a parked poll's answer (as the HTTP
// server's write timeout bounds the others').
const parkWriteTimeout = 2 * time.Minute

// parkedConn is a connection taken from the HTTP server: a parked poll,
// then (answered) a connection waiting for its next request. Its events
// are handled one at a time, on a goroutine started for them.
type parkedConn struct {
	p    *Parking
	s    *Server
	conn net.Conn
	fd   int    // -1: not watched
	id   uint64 // in the watcher

	mu         sync.Mutex
	pending    uint8
	running    bool // a goroutine handles events (or the handler still sets up)
	finished   bool
	registered bool // counted by Parking (Close waits for it)

	idle       bool // answered: waiting for the next request
	closeAfter bool // answer with Connection: close and close
	timer      *time.Timer

	// The poll.
	wait    *bus.Waiting
	queueID string
	path    string
	header  http.Header // the response's headers before the wait
	release func()      // gives back the poll's place among its connection's
	route   *routeMetrics
	start   time.Time
}

// receiveParked serves a long poll that may park; handled false leaves the
// request to the waiting handler.
func (s *Server) receiveParked(w http.ResponseWriter, r *http.Request, req bus.ReceiveRequest, release func()) (handled bool, err error) {
	p := s.cfg.Parking
	sw, ok := w.(*statusWriter)
	if !ok || !p.enabled() || r.Method != http.MethodGet || r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.Close {
		return false, nil
	}
	c := &parkedConn{p: p, s: s, fd: -1, running: true}
	ds, waiting, err := s.svc.ReceiveOrWait(r.Context(), req, func() { c.signal(evWake) })
	if waiting == nil {
		defer release()
		if err != nil {
			return true, err
		}
		s.answerReceive(w, r, req.QueueID, ds)
		return true, nil
	}
	header := w.Header().Clone()
	conn, brw, herr := http.NewResponseController(w).Hijack()
	if herr != nil {
		waiting.End()
		return false, nil // the handler waits instead (looking again first)
	}
	sw.parked = true
	c.conn, c.wait, c.queueID, c.path, c.header = conn, waiting, req.QueueID, r.URL.Path, header
	c.release, c.route, c.start = release, sw.route, sw.start
	// A client that sent more after its poll (pipelining) has it in the
	// reader net/http gives back: the connection is closed after the
	// answer rather than resumed without those bytes.
	c.closeAfter = brw.Reader.Buffered() > 0
	if c.registered = p.register(c); !c.registered {
		// The server began stopping meanwhile: answer empty at once.
		waiting.End()
		c.closeAfter = true
		c.answer(nil, nil)
		return true, nil
	}
	if !c.closeAfter {
		if c.fd = connFD(conn); c.fd >= 0 {
			if p.w.add(c) != nil {
				c.fd = -1
			}
		}
		// Unwatched, a client going away is noticed only at the answer:
		// the connection is not kept after it.
		c.closeAfter = c.fd < 0
	}
	c.timer = time.AfterFunc(req.Wait, func() { c.signal(evDeadline) })
	c.handoff()
	return true, nil
}

// signal tells c of ev; a goroutine handles it unless one already runs.
func (c *parkedConn) signal(ev uint8) {
	c.mu.Lock()
	if c.finished {
		c.mu.Unlock()
		return
	}
	c.pending |= ev
	if c.running {
		c.mu.Unlock()
		return
	}
	c.running = true
	c.mu.Unlock()
	go c.run()
}

// handoff ends the handler's setup: events that came meanwhile get their
// goroutine now.
func (c *parkedConn) handoff() {
	c.mu.Lock()
	if c.pending == 0 || c.finished {
		c.running = false
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.run()
}

func (c *parkedConn) run() {
	for {
		c.mu.Lock()
		ev := c.pending
		c.pending = 0
		if ev == 0 || c.finished {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		if c.idle {
			c.stepIdle(ev)
		} else {
			c.stepPoll(ev)
		}
	}
}

// stepPoll handles the events of a parked poll.
func (c *parkedConn) stepPoll(ev uint8) {
	if ev&evStop != 0 {
		c.wait.End()
		c.closeAfter = true
		c.answer(nil, nil)
		return
	}
	if ev&evReadable != 0 {
		switch c.peek() {
		case peekGone, peekData:
			// The client went away (or closed its side), or sent another
			// request before this one's answer: nothing is taken for it;
			// it is answered empty, as a handler whose client went away
			// is, and its connection closed.
			c.wait.End()
			c.closeAfter = true
			c.answer(nil, nil)
			return
		default:
			if c.p.w.rearm(c) != nil {
				c.closeAfter = true
			}
		}
	}
	if ev&evWake != 0 {
		// A store that does not answer within the node's time is given
		// up on as in the handler (ErrTimedOut: 503, not an empty answer).
		look := parkLookTimeout
		if t := c.s.cfg.StoreTimeout; t > 0 {
			look = t
		}
		ctx, cancel := context.WithTimeoutCause(context.Background(), look, bus.ErrTimedOut)
		ds, done, err := c.wait.Look(ctx)
		cancel()
		if done {
			c.answer(ds, err)
			return
		}
	}
	if ev&evDeadline != 0 {
		c.wait.End()
		c.answer(nil, nil)
	}
}

// stepIdle handles the events of an answered connection.
func (c *parkedConn) stepIdle(ev uint8) {
	switch {
	case ev&(evStop|evIdleOver) != 0:
		c.finish()
	case ev&evReadable != 0:
		// The next request (or the client's close) is there: the HTTP
		// server reads it (finish leaves the connection open for it).
		conn := c.conn
		c.conn = nil
		c.finish()
		select {
		case c.p.back <- conn:
		case <-c.p.done:
			_ = conn.Close()
		}
	}
}

type peekResult int

const (
	peekNothing peekResult = iota
	peekGone
	peekData
)

// peek reads what made a parked poll's connection readable.
func (c *parkedConn) peek() peekResult {
	_ = c.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var b [1]byte
	n, err := c.conn.Read(b[:])
	_ = c.conn.SetReadDeadline(time.Time{})
	switch {
	case n > 0:
		return peekData
	case err == nil:
		return peekNothing
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return peekNothing // a partial TLS record, or nothing after all
		}
		return peekGone
	}
}

// answer writes the poll's answer: ds, or err's refusal. A connection kept
// then waits for its next request.
func (c *parkedConn) answer(ds []bus.Delivery, err error) {
	if c.timer != nil {
		c.timer.Stop()
	}
	rw := &bufferedResponse{header: c.header}
	r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: c.path}, Header: http.Header{}} // its context: Background
	if err != nil {
		writeError(rw, r, c.s.log, onUnavailable(err, bus.RuleQueueUnavailable))
	} else {
		c.s.answerReceive(rw, r, c.queueID, ds)
	}
	closing := c.closeAfter || !c.p.enabled()
	b := rw.response(closing)
	_ = c.conn.SetWriteDeadline(time.Now().Add(parkWriteTimeout))
	_, werr := c.conn.Write(b)
	_ = c.conn.SetWriteDeadline(time.Time{})
	if werr != nil && len(ds) > 0 {
		c.s.log.Warn("receive answer lost; releasing", "queue_id", c.queueID, "messages", len(ds), "err", werr)
		c.s.svc.Release(c.queueID, ds)
	}
	c.endPoll(rw.status)
	if closing || werr != nil {
		c.finish()
		return
	}
	c.idle = true
	if c.p.w.rearm(c) != nil {
		c.finish()
		return
	}
	c.timer = time.AfterFunc(c.p.idle, func() { c.signal(evIdleOver) })
}

// endPoll counts the poll's request and gives back its place.
func (c *parkedConn) endPoll(status int) {
	c.route.done(status, c.start)
	c.release()
	c.wait, c.header, c.release = nil, nil, nil
}

// finish closes the connection (unless handed back) and forgets c.
func (c *parkedConn) finish() {
	c.mu.Lock()
	if c.finished {
		c.mu.Unlock()
		return
	}
	c.finished = true
	c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.fd >= 0 {
		c.p.w.remove(c)
	}
	if c.conn != nil {
		_ = c.conn.Close()
	}
	if c.registered {
		c.p.forget(c)
	}
}

// connFD is the file descriptor under conn (through TLS and wrappers that
// name what they wrap), -1 when there is none to watch.
func connFD(conn net.Conn) int {
	for range 8 {
		if sc, ok := conn.(syscall.Conn); ok {
			raw, err := sc.SyscallConn()
			if err != nil {
				return -1
			}
			fd := -1
			if raw.Control(func(f uintptr) { fd = int(f) }) != nil {
				return -1
			}
			return fd
		}
		u, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			return -1
		}
		conn = u.NetConn()
	}
	return -1
}

// bufferedResponse collects an answer that is written to a parked
// connection as one HTTP/1.1 response.
type bufferedResponse struct {
	header http.Header
	status int
	body   []byte
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	b.body = append(b.body, p...)
	return len(p), nil
}

// Flush does nothing: the answer is written whole.
func (b *bufferedResponse) Flush() {}

// response is the answer on the wire, with a Content-Length and the Date
// net/http would add, and Connection: close when closing.
func (b *bufferedResponse) response(closing bool) []byte {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	h := b.header
	h["Date"] = []string{time.Now().UTC().Format(http.TimeFormat)}
	h["Content-Length"] = []string{strconv.Itoa(len(b.body))}
	if closing {
		h["Connection"] = []string{"close"}
	}
	var buf bytes.Buffer
	buf.Grow(256 + len(b.body))
	buf.WriteString("HTTP/1.1 ")
	buf.WriteString(strconv.Itoa(b.status))
	buf.WriteByte(' ')
	buf.WriteString(http.StatusText(b.status))
	buf.WriteString("\r\n")
	_ = h.Write(&buf)
	buf.WriteString("\r\n")
	buf.Write(b.body)
	return buf.Bytes()
}
