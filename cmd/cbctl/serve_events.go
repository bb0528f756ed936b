package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// The pages hear of every change through Server-Sent Events on GET
// /api/events:
//
//	transition  a transition from the feed, and the scope's row after it
//	row         a scope's row after an operator's change from a page
//	action      an operator's change from a page: who, what, the result
//	refresh     a listing refreshed the table (window counts): read your page again
//	status      whether the feed and the listing work
//
// A page that does not keep up is dropped (its browser reconnects and
// reads its page again) so that no page slows the others or the feed.

// subscriberBuffer is how many events a page may fall behind.
const subscriberBuffer = 256

// keepAlive is how often an idle stream carries a comment, so that
// proxies keep it and a gone browser is noticed.
const keepAlive = 15 * time.Second

type subscriber struct {
	events chan []byte // closed when the hub drops the subscriber
}

func (h *hub) subscribe() *subscriber {
	s := &subscriber{events: make(chan []byte, subscriberBuffer)}
	h.mu.Lock()
	h.subs[s] = true
	h.mu.Unlock()
	// The first page after a quiet spell wants fresh counts.
	h.poke()
	return s
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[s] {
		delete(h.subs, s)
		close(s.events)
	}
}

// broadcast sends one event to every page.
func (h *hub) broadcast(name string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // our own types always marshal
	}
	ev := fmt.Appendf(nil, "event: %s\ndata: %s\n\n", name, data)
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.events <- ev:
		default:
			delete(h.subs, s)
			close(s.events)
		}
	}
}

// events is one page's event stream, until the page goes, falls behind,
// or the server stops.
func (s *server) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	sub := s.hub.subscribe()
	defer s.hub.unsubscribe(sub)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	status, _ := json.Marshal(s.hub.status())
	// retry: a dropped stream is opened again after a second.
	fmt.Fprintf(w, "retry: 1000\n\nevent: status\ndata: %s\n\n", status)
	flusher.Flush()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-sub.events:
			if !ok {
				return
			}
			if _, err := w.Write(ev); err != nil {
				return
			}
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		}
		flusher.Flush()
	}
}
