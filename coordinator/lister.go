package coordinator

import "context"

// Lister is implemented by coordinators that can list the scopes they hold
// state for: what an operator's listing (cbctl list) or a dashboard shows.
// Both coordinators of this module implement it.
type Lister interface {
	// List returns a snapshot, as of now, of every scope that is born,
	// sorted by scope; p gives the window the counts are read over. A
	// scope whose stored state is corrupt does not fail the listing: it
	// is listed in its place with only Scope and Snapshot.Corrupt set, so
	// that the healthy scopes still show. It is an operator's tool: its
	// cost grows with the scopes, or with the whole store, and it is not
	// meant for a request's path.
	List(ctx context.Context, p Policy) ([]Snapshot, error)
}
