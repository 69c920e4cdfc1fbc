// Package keylock serialises work per key (an environment's name) while
// different keys go ahead in parallel.
package keylock

import "sync"

// Map holds one mutex per key; the zero value is ready. Keys are never
// forgotten: there is one per environment name ever used, which is small.
type Map struct {
	m sync.Map // key → *sync.Mutex
}

// Lock locks key and returns its unlock.
func (k *Map) Lock(key string) (unlock func()) {
	v, _ := k.m.LoadOrStore(key, new(sync.Mutex))
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}
