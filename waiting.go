package cbgrpc

import (
	"cmp"
	"slices"
	"sync"
)

// Where outcomes wait for the recorder's loop: shards, one mostly per P,
// that calls append to and the loop takes from (collect).

// shard is where the calls of one P, mostly, leave their outcomes.
type shard struct {
	mu     sync.Mutex
	closed bool // the recorder stopped: what comes now is dropped
	// waiting holds, per scope and in order, what calls added; spare,
	// per scope, the list the loop last took, emptied, for the next
	// outcomes to fill (collect): a busy scope's list would otherwise
	// grow from nothing every interval, copying itself at each doubling.
	// A scope that sent nothing for an interval loses its spare.
	// A list is held by its address, so that appending to it writes no map.
	waiting map[string]*[]item
	spare   map[string]*[]item
	// lastScope and lastList are the list of waiting last found
	// (list); nil once taken.
	lastScope string
	lastList  *[]item
	_         [64]byte // a cache line of its own, apart from its neighbours'
}

// shardOf is which shard the calls of a P add to: the pool keeps one per
// P, and one it forgets is made again, naming the next shard.
type shardOf struct{ i int }

// shardsPerP is how many shards the recorder has for each P: two Ps whose
// shardOf the pool forgot may then share less often.
const shardsPerP = 2

// lock returns the caller's shard, locked, and the pool's note of it.
func (r *recorder) lock() (*shard, *shardOf) {
	of := r.local.Get().(*shardOf)
	s := r.shards[of.i]
	s.mu.Lock()
	return s, of
}

// add queues an outcome; it never blocks the call.
func (r *recorder) add(it *item) {
	s, of := r.lock()
	defer r.local.Put(of)
	if s.closed {
		s.mu.Unlock()
		r.in.tel.drop(it.scope, dropClosed, 1)
		it.verdict.release()
		return
	}
	if testHookRecorderAdd != nil {
		testHookRecorderAdd()
	}
	list := s.list(it.scope)
	if list == nil {
		list = s.open(it.scope)
		// At most once an interval a scope and shard: whether the
		// coordinator has yet to hear this replica in it.
		it.urgent = it.urgent || r.in.known.introduce(it.scope)
	}
	it.mergeable = it.plain()
	if l := len(*list); l > 0 && it.mergeable && (*list)[l-1].mergeable && (*list)[l-1].outcome == it.outcome {
		// One more of a run: the loop takes it as many outcomes.
		last := &(*list)[l-1]
		last.more++
		full := last.more%r.kickAt == 0
		s.mu.Unlock()
		if full {
			r.wake()
		}
		return
	}
	if len(*list) >= r.in.queueSize {
		s.mu.Unlock()
		r.in.tel.drop(it.scope, dropQueueFull, 1)
		it.verdict.release()
		return
	}
	*list = append(*list, *it)
	now := it.claim != "" || it.outcome.Failed() || it.urgent || len(*list) >= r.kickAt
	s.mu.Unlock()
	if now {
		r.wake()
	}
}

// list is the list of scope's outcomes waiting in s; nil: none. The
// shard remembers the last one found, so that the calls of a busy scope
// hash its name only when another scope's came between.
func (s *shard) list(scope string) *[]item {
	if s.lastList != nil && s.lastScope == scope {
		return s.lastList
	}
	list := s.waiting[scope]
	if list != nil {
		s.lastScope, s.lastList = scope, list
	}
	return list
}

// open starts the list of scope's outcomes waiting in s: its spare, if
// it has one.
func (s *shard) open(scope string) *[]item {
	list := s.spare[scope]
	if list != nil {
		delete(s.spare, scope)
	} else {
		list = new([]item)
	}
	s.waiting[scope] = list
	s.lastScope, s.lastList = scope, list
	return list
}

// wake tells the loop that something waiting must go now.
func (r *recorder) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// takenList is a list the loop took from a shard.
type takenList struct {
	from *shard
	list *[]item
}

// collect takes what waits, of scope, or of every scope when scope is "".
func (r *recorder) collect(scope string) {
	all := make(map[string][]takenList)
	for _, s := range r.shards {
		for scope, list := range s.take(scope) {
			all[scope] = append(all[scope], takenList{from: s, list: list})
		}
	}
	// All of it first, then what must go: one batch per scope.
	for scope, lists := range all {
		for _, it := range r.inOrder(lists) {
			r.take(it)
		}
		r.ready(scope)
	}
	for scope, lists := range all {
		for _, l := range lists {
			l.from.giveBack(scope, l.list)
		}
	}
}

// inOrder returns the items of lists, one scope's, in the order they were
// added: the calls of one goroutine that moved between Ps keep theirs.
func (r *recorder) inOrder(lists []takenList) []item {
	if len(lists) == 1 {
		return *lists[0].list
	}
	clear(r.merged)
	r.merged = r.merged[:0]
	for _, l := range lists {
		r.merged = append(r.merged, *l.list...)
	}
	slices.SortStableFunc(r.merged, func(a, b item) int { return cmp.Compare(a.at, b.at) })
	return r.merged
}

// take takes what waits in s, of scope, or of every scope when scope is "".
func (s *shard) take(scope string) map[string]*[]item {
	s.mu.Lock()
	defer s.mu.Unlock()
	var taken map[string]*[]item
	s.lastScope, s.lastList = "", nil
	if scope == "" {
		taken, s.waiting = s.waiting, make(map[string]*[]item, len(s.waiting))
	} else if list, ok := s.waiting[scope]; ok {
		taken = map[string]*[]item{scope: list}
		delete(s.waiting, scope)
	}
	// Double buffering: a busy scope's next outcomes fill the list taken
	// the time before, while this one is read; a scope that sent nothing
	// since gives its lists up.
	for scope, list := range taken {
		if spare, ok := s.spare[scope]; ok && len(*list) > 0 {
			s.waiting[scope] = spare
		}
		delete(s.spare, scope)
	}
	return taken
}

// giveBack keeps list, taken from s and read, as the spare of its scope.
func (s *shard) giveBack(scope string, list *[]item) {
	if len(*list) == 0 {
		return
	}
	clear(*list) // let go of what the items held
	*list = (*list)[:0]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spare[scope] = list
}

// forget drops the spare of scope, idle.
func (s *shard) forget(scope string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.spare, scope)
}
