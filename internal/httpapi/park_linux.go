package httpapi

import (
	"os"
	"sync"
	"syscall"
)

// watcher is one epoll set of parked connections' file descriptors: a
// readable descriptor (the client sent something, or closed) wakes its
// connection. Registrations are one-shot: a connection re-arms its own.
//
// The set itself is read through Go's own poller (an epoll descriptor is
// readable when one of its descriptors is ready), so that waiting for it
// holds no thread in a blocking system call: such a thread keeps one of
// the process's Ps (GOMAXPROCS) until the runtime takes it back, up to
// 10 ms later on an otherwise idle node, which delayed the requests that
// came meanwhile.
type watcher struct {
	epfd int
	file *os.File // epfd, in Go's poller

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
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		return nil, err
	}
	w := &watcher{epfd: epfd, file: os.NewFile(uintptr(epfd), "epoll"), conns: make(map[uint64]*parkedConn)} //nolint:gosec // a descriptor just made
	raw, err := w.file.SyscallConn()
	if err != nil {
		_ = w.file.Close()
		return nil, err
	}
	go w.run(raw)
	return w, nil
}

func event(events uint32, id uint64) syscall.EpollEvent {
	return syscall.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))} //nolint:gosec // the id's two halves
}

// add watches c's descriptor.
func (w *watcher) add(c *parkedConn) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return syscall.EBADF
	}
	w.next++
	c.id = w.next
	ev := event(watchEvents, c.id)
	if err := syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		return err
	}
	w.conns[c.id] = c
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

// run reads the set's events until it is closed.
func (w *watcher) run(raw syscall.RawConn) {
	events := make([]syscall.EpollEvent, 128)
	var ready []*parkedConn
	for {
		err := raw.Read(func(fd uintptr) bool {
			for {
				n, err := syscall.EpollWait(int(fd), events, 0)
				if err == syscall.EINTR {
					continue
				}
				if err != nil || n == 0 {
					// Nothing (more) ready: hand on what was read, or wait
					// for the poller.
					return len(ready) > 0
				}
				w.mu.Lock()
				for _, ev := range events[:n] {
					id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32 //nolint:gosec // the id's two halves
					if c := w.conns[id]; c != nil {
						ready = append(ready, c)
					}
				}
				w.mu.Unlock()
				if n < len(events) {
					return true
				}
			}
		})
		for i, c := range ready {
			c.signal(evReadable)
			ready[i] = nil
		}
		ready = ready[:0]
		if err != nil {
			return // closed
		}
	}
}

// close stops the reading goroutine and closes the set.
func (w *watcher) close() {
	w.stop.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		_ = w.file.Close()
	})
}
