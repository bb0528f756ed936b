package memory

// place is a bucket of one layout of the window: its index, the width of
// its buckets and how many the window holds.
type place struct{ idx, width, buckets int64 }

// liveSum is the sum of the window's live buckets as read at one place,
// kept while nothing but add changes the window: a Record reads the sum
// after each of its outcomes, which would otherwise walk the window each
// time. Whatever else changes the window (buckets dropped, the window
// re-laid or restarted) forgets it.
type liveSum struct {
	where place
	sum   bucket
	ok    bool
}

// at returns the sum kept for where, if any.
func (l *liveSum) at(where place) (bucket, bool) {
	return l.sum, l.ok && l.where == where
}

// keep keeps sum as the live sum at where.
func (l *liveSum) keep(where place, sum bucket) {
	*l = liveSum{where: where, sum: sum, ok: true}
}

// forget forgets the sum kept: the window changed otherwise than by add.
func (l *liveSum) forget() { l.ok = false }

// added notes that one was added to the bucket at where, which is live
// there: the sum kept at where grows by it, one kept elsewhere is
// forgotten.
func (l *liveSum) added(where place, one bucket) {
	if l.ok && l.where == where {
		l.sum.plus(one)
		return
	}
	l.forget()
}

// plus adds o's counts to bk.
func (bk *bucket) plus(o bucket) {
	bk.calls += o.calls
	bk.failures += o.failures
	bk.slow += o.slow
	bk.throttled += o.throttled
}
