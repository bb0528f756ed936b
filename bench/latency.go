package bench

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// latencies is a histogram of durations, safe for concurrent use, in
// buckets that double from 1 µs: bucket i holds durations in
// [2^(i-1), 2^i) µs, and a quantile is read as its bucket's upper bound,
// so within a factor of two.
type latencies struct {
	buckets [32]atomic.Int64
}

func (l *latencies) add(d time.Duration) {
	us := uint64(max(d.Microseconds(), 0))
	l.buckets[min(bits.Len64(us), len(l.buckets)-1)].Add(1)
}

// counts returns the histogram's counts.
func (l *latencies) counts() [32]int64 {
	var c [32]int64
	for i := range l.buckets {
		c[i] = l.buckets[i].Load()
	}
	return c
}

// quantile returns the upper bound of the bucket that holds quantile q of
// the durations counted between the histograms earlier and later; 0 if
// none.
func quantile(earlier, later [32]int64, q float64) time.Duration {
	var total int64
	for i := range later {
		total += later[i] - earlier[i]
	}
	if total == 0 {
		return 0
	}
	rank := int64(q * float64(total))
	var seen int64
	for i := range later {
		seen += later[i] - earlier[i]
		if seen > rank {
			return time.Duration(1<<i) * time.Microsecond
		}
	}
	return time.Duration(1<<(len(later)-1)) * time.Microsecond
}
