package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// actionJSON is the body of POST /api/{isolate,release,disable,enable}.
type actionJSON struct {
	Scope  string `json:"scope"`
	Reason string `json:"reason"`
	By     string `json:"by"`  // who acts; "dashboard" when empty
	For    string `json:"for"` // isolate only: a duration ("30m"), "" until released
}

// actionEventJSON is an operator's change from a page, as every page
// shows it, and as the POST answers it.
type actionEventJSON struct {
	At     string      `json:"at"`
	Op     string      `json:"op"`
	Scope  string      `json:"scope"`
	By     string      `json:"by"`
	Reason string      `json:"reason"`
	Result *resultJSON `json:"result,omitempty"`
	Line   string      `json:"line,omitempty"` // the result as the command prints it
	// Durable says whether the replicas have the change: "none" (nothing
	// to wait for), "confirmed", "partial" or "unconfirmed"; Replicas in
	// words.
	Durable  string `json:"durable,omitempty"`
	Replicas string `json:"replicas,omitempty"`
	Error    string `json:"error,omitempty"`
}

// act makes an operator's change from a page, through the code of the
// command of the same name, and tells every page.
func (s *server) act(w http.ResponseWriter, r *http.Request) {
	op := r.PathValue("op")
	switch op {
	case "isolate", "release", "disable", "enable":
	default:
		writeError(w, http.StatusNotFound, "no such action %q: want isolate, release, disable or enable", op)
		return
	}
	if s.readOnly {
		writeError(w, http.StatusForbidden, "read-only: this dashboard was started with --read-only and makes no change")
		return
	}
	var in actionJSON
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "want a JSON object {\"scope\", \"reason\", \"by\", \"for\"}: %v", err)
		return
	}
	n := coordinator.Note{By: in.By, Reason: in.Reason}
	if n.By == "" {
		n.By = "dashboard"
	}
	if in.For != "" {
		d, err := time.ParseDuration(in.For)
		if err != nil {
			writeError(w, http.StatusBadRequest, "for %q: want a duration such as 30m or 2h", in.For)
			return
		}
		n.For = d
	}
	if err := coordinator.CheckScope(in.Scope); err != nil {
		writeError(w, http.StatusBadRequest, "scope: %v", err)
		return
	}
	// The command line asks a reason of isolate and disable; the page asks
	// it of every change, made by whoever has the page open.
	if strings.TrimSpace(n.Reason) == "" {
		writeError(w, http.StatusBadRequest, "reason: the dashboard asks a reason for every change")
		return
	}
	if err := n.Validate(op); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), s.e.timeout)
	defer cancel()
	ev := actionEventJSON{At: jsonTime(time.Now()), Op: op, Scope: in.Scope, By: n.By, Reason: n.Reason}
	res, u, err := control(ctx, s.c, s.p, op, in.Scope, n, false)
	code := http.StatusOK
	if err != nil {
		ev.Error = err.Error()
		code = http.StatusBadGateway
		var ce *cmdError
		if errors.As(err, &ce) && ce.code == exitNotFound {
			code = http.StatusNotFound
		}
	} else {
		out := toResultJSON(in.Scope, res, u)
		ev.Result, ev.Line = &out, resultLine(in.Scope, res, u)
		ev.Durable, ev.Replicas = durability(res.Replicas, s.e.replicaTimeout)
		// The feed brings the transition; a note replaced in the same
		// state is no transition, so read the scope back.
		learned := time.Now()
		if after, err := s.c.Snapshot(ctx, in.Scope, s.p); err == nil {
			if row := s.hub.learn(after, learned); row != nil {
				s.hub.broadcast("row", row)
			}
		}
	}
	fmt.Fprintf(s.e.stderr, "cbctl: serve: from %s: %s %s by %s: %s\n", r.RemoteAddr, op, quoteScope(in.Scope), n.By, ev.Line+ev.Error)
	s.hub.broadcast("action", ev)
	writeAPI(w, code, ev)
}

// durability says whether the replicas have an operator's change, as the
// commands do on standard error.
func durability(r coordinator.Replication, timeout time.Duration) (level, words string) {
	switch {
	case r.Wanted == 0:
		return "none", "no replica to wait for"
	case r.Confirmed >= r.Wanted:
		return "confirmed", fmt.Sprintf("confirmed by %d of %d replicas", r.Confirmed, r.Wanted)
	case r.Confirmed == 0:
		return "unconfirmed", fmt.Sprintf("not confirmed by any replica (0 of %d within %v): in force on the master, "+
			"but a failover now would lose it; do it again once the replicas are back", r.Wanted, timeout)
	}
	return "partial", fmt.Sprintf("confirmed by %d of %d replicas within %v; a failover to another may lose it", r.Confirmed, r.Wanted, timeout)
}
