package memory

// The window keeps the layout it was written with (bucket width and
// count), so that a change of Policy.Window or Policy.Buckets neither
// loses counts (a narrower bucket would place every written bucket out of
// the window) nor keeps them too long (a wider one would place them in
// the future), and so that a reader with another policy reads them right.

// layout is the bucket width (ms) and count the window is read with: the
// ones it was written with, or r's while nothing is written.
func (b *breaker) layout(r *rules) (width, buckets int64) {
	if b.width == 0 {
		return r.width, r.buckets
	}
	return b.width, b.buckets
}

// layFor returns the rules a Record under r counts with at now, and
// whether their layout is r's own. While replicas of the window's layout
// still record (one of their Records counted in a bucket that started
// within a window of that layout), a Record of another layout counts into the window's buckets:
// r in the window's layout. So counts keep their age while replicas of
// two layouts record in turn (a rolling deploy), and the window changes
// layout once, when the old one is no longer written (relay).
func (b *breaker) layFor(r *rules, now int64) (*rules, bool) {
	if b.width == 0 || (b.width == r.width && b.buckets == r.buckets) || now-b.laidAt >= b.width*b.buckets {
		return r, true
	}
	laid := *r
	laid.width, laid.buckets = b.width, b.buckets
	return &laid, false
}

// relay makes r's layout the window's before an outcome is added. A
// window written with another layout is re-laid by time: the counts of
// each bucket live under the old layout go to the bucket of r's that holds
// the old bucket's first millisecond, so that no count moves later than
// it was counted (it may leave up to a bucket of r's early, once); counts
// whose bucket starts before r's window have left it. None is counted
// twice.
func (b *breaker) relay(r *rules, now int64) {
	if b.width == r.width && b.buckets == r.buckets {
		return
	}
	if b.width != 0 {
		b.window = b.relaid(b.window, r, now)
		b.swept, b.summed, b.current = place{}, liveSum{}, nil
		for _, t := range b.replicas {
			t.window = b.relaid(t.window, r, now)
		}
	}
	b.width, b.buckets = r.width, r.buckets
	// The window starts afresh in the new layout: the replicas dead in it
	// stay dead.
	b.dropDead(r, now)
}

// relaid is window, written with the breaker's layout, re-laid into r's.
func (b *breaker) relaid(window map[int64]*bucket, r *rules, now int64) map[int64]*bucket {
	idx0, idx := now/b.width, now/r.width
	into := make(map[int64]*bucket)
	for i, bk := range window {
		j := i * b.width / r.width
		if i <= idx0-b.buckets || i > idx0 || j <= idx-r.buckets {
			continue
		}
		sum := into[j]
		if sum == nil {
			sum = &bucket{}
			into[j] = sum
		}
		sum.plus(*bk)
	}
	return into
}

// live sums the buckets live at now, read with the window's layout.
func (b *breaker) live(r *rules, now int64) bucket {
	width, buckets := b.layout(r)
	idx := now / width
	if sum, ok := b.summed.at(place{idx, width, buckets}); ok {
		return sum
	}
	var sum bucket
	for i, bk := range b.window {
		if i > idx-buckets && i <= idx {
			sum.plus(*bk)
		}
	}
	b.summed.keep(place{idx, width, buckets}, sum)
	return sum
}
