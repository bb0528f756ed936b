package memory

// FeedBuffer is feedBuffer, for the tests of package memory_test, which
// use coordinatortest and so cannot be in package memory (coordinatortest
// imports memory).
const FeedBuffer = feedBuffer
