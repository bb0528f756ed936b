package main

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// The dashboard pages its scopes on the server: a page of the browser
// holds one page of the table (100 scopes unless it asks for another
// size), filtered and sorted here, so ten thousand scopes cost the
// browser what a hundred do.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// pageJSON is one page of the table, GET /api/scopes?q=TEXT&sort=state|ratio|scope&page=N&size=N.
type pageJSON struct {
	Now      string         `json:"now"` // the server's clock, for the countdowns
	Version  uint64         `json:"version"`
	ListedAt string         `json:"listed_at"`
	Scopes   int            `json:"scopes"`  // every scope the dashboard knows
	Matched  int            `json:"matched"` // those the filter keeps
	Page     int            `json:"page"`    // from 1
	Pages    int            `json:"pages"`
	Size     int            `json:"size"`
	States   map[string]int `json:"states"` // scopes per state, of every scope
	Rows     []rowJSON      `json:"rows"`
	Status   statusJSON     `json:"status"`
}

// severity orders states for the sort by state: what needs a look first.
var severity = map[coordinator.State]int{
	coordinator.StateIsolated: 0,
	coordinator.StateOpen:     1,
	coordinator.StateHalfOpen: 2,
	coordinator.StateDisabled: 3,
	coordinator.StateClosed:   4,
}

// rank is where s goes in the sort by state: a corrupt scope first.
func rank(s coordinator.Snapshot) int {
	if s.Corrupt != nil {
		return -1
	}
	return severity[s.State]
}

var sorts = map[string]func(a, b coordinator.Snapshot) int{
	"state": func(a, b coordinator.Snapshot) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a.Scope, b.Scope))
	},
	"ratio": func(a, b coordinator.Snapshot) int {
		return cmp.Or(cmp.Compare(ratio(b), ratio(a)), cmp.Compare(b.Failures, a.Failures), strings.Compare(a.Scope, b.Scope))
	},
	"scope": func(a, b coordinator.Snapshot) int { return strings.Compare(a.Scope, b.Scope) },
}

func ratio(s coordinator.Snapshot) float64 {
	if s.Calls == 0 {
		return 0
	}
	return float64(s.Failures) / float64(s.Calls)
}

func (s *server) listing(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	order := cmp.Or(q.Get("sort"), "state")
	less, ok := sorts[order]
	if !ok {
		writeError(w, http.StatusBadRequest, "sort %q: want state, ratio or scope", order)
		return
	}
	page, err := intParam(q.Get("page"), 1, 1, 1<<30)
	if err != nil {
		writeError(w, http.StatusBadRequest, "page: %v", err)
		return
	}
	size, err := intParam(q.Get("size"), defaultPageSize, 1, maxPageSize)
	if err != nil {
		writeError(w, http.StatusBadRequest, "size: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.hub.timeout)
	s.hub.current(ctx)
	cancel()
	p := s.hub.page(strings.ToLower(q.Get("q")), less, page, size)
	if hook := testHookListed.Load(); hook != nil {
		(*hook)()
	}
	writeAPI(w, http.StatusOK, p)
}

// testHookListed, when a test sets it, runs between reading a page of the
// table and sending it: a listing read before a transition and delivered
// after it.
var testHookListed atomic.Pointer[func()]

// intParam reads a query parameter: def when absent, else a number in
// [lo, hi].
func intParam(v string, def, lo, hi int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, &paramError{v, lo, hi}
	}
	return n, nil
}

type paramError struct {
	v      string
	lo, hi int
}

func (e *paramError) Error() string {
	return strconv.Quote(e.v) + ": want a number from " + strconv.Itoa(e.lo) + " to " + strconv.Itoa(e.hi)
}

// page filters the table by text (in the scope, the state or the note),
// sorts it and cuts one page out of it; a page past the last is the last.
func (h *hub) page(filter string, order func(a, b coordinator.Snapshot) int, page, size int) pageJSON {
	h.mu.Lock()
	out := pageJSON{Now: jsonTime(time.Now()), Version: h.version, ListedAt: jsonTime(h.listedAt),
		Scopes: len(h.rows), Size: size, States: map[string]int{}}
	var rows []coordinator.Snapshot
	for _, r := range h.rows {
		out.States[stateName(r.s)]++
		if filter == "" || strings.Contains(strings.ToLower(r.s.Scope+"\n"+stateName(r.s)+"\n"+note(r.s)), filter) {
			rows = append(rows, r.s)
		}
	}
	h.mu.Unlock()
	out.Status = h.status()
	slices.SortFunc(rows, order)
	out.Matched = len(rows)
	out.Pages = max(1, (len(rows)+size-1)/size)
	out.Page = min(page, out.Pages)
	rows = rows[min(len(rows), (out.Page-1)*size):min(len(rows), out.Page*size)]
	out.Rows = make([]rowJSON, len(rows))
	for i, s := range rows {
		out.Rows[i] = toRowJSON(s)
	}
	return out
}
