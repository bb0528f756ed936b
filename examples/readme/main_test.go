package main

import "testing"

// The snippet runs as is: it sets up the breaker and the connection
// without a Redis, since neither connects before a call.
func TestSnippetRuns(t *testing.T) {
	main()
}
