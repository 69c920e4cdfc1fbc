package hoptrace

// stopForTest turns marks off and drops what is unwritten, so a test that
// starts them can run again in the same process (go test -count).
func stopForTest() {
	on.Store(false)
	mu.Lock()
	buf = buf[:0]
	mu.Unlock()
}
