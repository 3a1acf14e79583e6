//go:build !linux

package httpapi

import "errors"

// watcher has no implementation here: long polls wait in their handlers.
type watcher struct{}

func newWatcher() (*watcher, error) { return nil, errors.New("parking needs epoll (Linux)") }

func (w *watcher) add(*parkedConn) error   { return errors.ErrUnsupported }
func (w *watcher) rearm(*parkedConn) error { return errors.ErrUnsupported }
func (w *watcher) remove(*parkedConn)      {}
func (w *watcher) close()                  {}
