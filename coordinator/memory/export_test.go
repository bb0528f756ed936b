package memory

// FeedBuffer is feedBuffer, for the tests of package memory_test, which
// use coordinatortest and so cannot be in package memory (coordinatortest
// imports memory).
const FeedBuffer = feedBuffer

// Held is how many scopes c holds state for, forgotten or not.
func (c *Coordinator) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.scopes)
}
