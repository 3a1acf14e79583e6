package httpapi

import (
	"io"
	"sync"
	"time"
)

// deadline calls its function once limit of running time has passed; it
// does not run while paused (a request body on its way).
type deadline struct {
	mu      sync.Mutex
	timer   *time.Timer
	left    time.Duration // while paused: what is left
	resumed time.Time     // when it last started running
	paused  bool
}

func newDeadline(limit time.Duration, fire func()) *deadline {
	return &deadline{timer: time.AfterFunc(limit, fire), left: limit, resumed: time.Now()}
}

// pause stops the clock; a deadline that has fired stays fired.
func (d *deadline) pause() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.paused || !d.timer.Stop() {
		return
	}
	d.paused = true
	d.left -= time.Since(d.resumed)
}

// resume starts the clock again with what was left.
func (d *deadline) resume() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.paused {
		return
	}
	d.paused = false
	d.resumed = time.Now()
	d.timer.Reset(max(d.left, 0))
}

// stop ends the deadline without firing it.
func (d *deadline) stop() { d.timer.Stop() }

// pausingBody pauses a deadline from the first read of a request body
// until the body has been read to its end (or failed, or was closed).
type pausingBody struct {
	io.ReadCloser
	d       *deadline
	started bool
	done    bool
}

func (b *pausingBody) Read(p []byte) (int, error) {
	if !b.started {
		b.started = true
		b.d.pause()
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.end()
	}
	return n, err
}

func (b *pausingBody) Close() error {
	b.end()
	return b.ReadCloser.Close()
}

func (b *pausingBody) end() {
	if b.started && !b.done {
		b.done = true
		b.d.resume()
	}
}
