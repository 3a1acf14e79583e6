package httpapi

import (
	"sync"
	"syscall"
)

// watcher is one epoll set of parked connections' file descriptors, read
// by one goroutine: a readable descriptor (the client sent something, or
// closed) wakes its connection. Registrations are one-shot: a connection
// re-arms its own.
type watcher struct {
	epfd int
	pipe [2]int // writing to pipe[1] stops the reading goroutine

	mu     sync.Mutex
	next   uint64
	conns  map[uint64]*parkedConn
	closed bool // the set is closed: its descriptor number may be another's
	stop   sync.Once
}

// watchEvents: readable, or the peer closed its side.
const watchEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

func newWatcher() (*watcher, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	w := &watcher{epfd: epfd, conns: make(map[uint64]*parkedConn)}
	if err := syscall.Pipe2(w.pipe[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		_ = syscall.Close(epfd)
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN} // data 0: the stop pipe
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, w.pipe[0], &ev); err != nil {
		w.closeFDs()
		return nil, err
	}
	go w.run()
	return w, nil
}

func event(events uint32, id uint64) syscall.EpollEvent {
	return syscall.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))} //nolint:gosec // the id's two halves
}

// add watches c's descriptor.
func (w *watcher) add(c *parkedConn) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return syscall.EBADF
	}
	w.next++
	c.id = w.next
	w.conns[c.id] = c
	w.mu.Unlock()
	ev := event(watchEvents, c.id)
	if err := syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		w.mu.Lock()
		delete(w.conns, c.id)
		w.mu.Unlock()
		return err
	}
	return nil
}

// rearm watches c's descriptor again after an event.
func (w *watcher) rearm(c *parkedConn) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.fd < 0 || w.closed {
		return syscall.EBADF
	}
	ev := event(watchEvents, c.id)
	return syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_MOD, c.fd, &ev)
}

// remove stops watching c's descriptor (before it is closed or handed on).
func (w *watcher) remove(c *parkedConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.fd < 0 {
		return
	}
	if !w.closed {
		_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, c.fd, nil)
	}
	delete(w.conns, c.id)
	c.fd = -1
}

func (w *watcher) run() {
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(w.epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32 //nolint:gosec // the id's two halves
			if id == 0 {
				w.closeFDs()
				return
			}
			w.mu.Lock()
			c := w.conns[id]
			w.mu.Unlock()
			if c != nil {
				c.signal(evReadable)
			}
		}
	}
}

// close stops the reading goroutine, which closes the set.
func (w *watcher) close() {
	w.stop.Do(func() { _, _ = syscall.Write(w.pipe[1], []byte{0}) })
}

func (w *watcher) closeFDs() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	_ = syscall.Close(w.pipe[0])
	_ = syscall.Close(w.pipe[1])
	_ = syscall.Close(w.epfd)
}
