package client

import (
	"container/list"
	"sync"
)

// lru is a bounded map that forgets its least recently used entries. The
// SDK keeps its dependencies to x/oauth2; this is all the cache it needs.
type lru[K comparable, V any] struct {
	mu    sync.Mutex
	size  int
	order *list.List // front: most recently used
	items map[K]*list.Element
}

type lruEntry[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](size int) *lru[K, V] {
	return &lru[K, V]{size: size, order: list.New(), items: make(map[K]*list.Element, min(size, 1024))}
}

// get returns the value of k and marks it used.
func (c *lru[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*lruEntry[K, V]).val, true
	}
	var zero V
	return zero, false
}

// put sets k to v, dropping the least recently used entry when full.
func (c *lru[K, V]) put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		e.Value.(*lruEntry[K, V]).val = v
		c.order.MoveToFront(e)
		return
	}
	c.items[k] = c.order.PushFront(&lruEntry[K, V]{key: k, val: v})
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*lruEntry[K, V]).key)
	}
}

// update sets k to f(old, found) in one step and returns the new value.
func (c *lru[K, V]) update(k K, f func(old V, found bool) V) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	var old V
	e, found := c.items[k]
	if found {
		old = e.Value.(*lruEntry[K, V]).val
	}
	v := f(old, found)
	if found {
		e.Value.(*lruEntry[K, V]).val = v
		c.order.MoveToFront(e)
		return v
	}
	c.items[k] = c.order.PushFront(&lruEntry[K, V]{key: k, val: v})
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*lruEntry[K, V]).key)
	}
	return v
}
