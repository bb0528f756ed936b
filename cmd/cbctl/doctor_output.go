package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// doctorJSON is doctor's --json output: healthy when no check warned or
// failed.
type doctorJSON struct {
	Healthy  bool      `json:"healthy"`
	Warnings int       `json:"warnings"`
	Failures int       `json:"failures"`
	Checks   []finding `json:"checks"`
}

// report prints the findings and returns the error that carries doctor's
// exit status.
func (d *doctor) report() error {
	out := doctorJSON{Checks: d.findings}
	for _, f := range d.findings {
		switch f.Status {
		case statusWarn:
			out.Warnings++
		case statusFail:
			out.Failures++
		}
	}
	out.Healthy = out.Warnings == 0 && out.Failures == 0
	var err error
	if d.e.json {
		err = writeJSON(d.e.stdout, out)
	} else {
		err = writeFindings(d.e.stdout, out)
	}
	switch {
	case err != nil:
		return err
	case out.Failures > 0:
		what := count(out.Failures, "failure")
		if out.Warnings > 0 {
			what += " and " + count(out.Warnings, "warning")
		}
		return &cmdError{exitFailures, fmt.Errorf("%s: the coordinator cannot work as it should here", what)}
	case out.Warnings > 0:
		return &cmdError{exitWarnings, fmt.Errorf("%s, no failure", count(out.Warnings, "warning"))}
	}
	return nil
}

// writeFindings writes one line per finding: its status, its check, on a
// Cluster the node, what it found and, after "->", what to change.
func writeFindings(w io.Writer, out doctorJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range out.Checks {
		text := f.Found
		if f.Node != "" {
			text = f.Node + ": " + text
		}
		if f.Change != "" {
			text += " -> " + f.Change
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Status, f.Check, escapeLines(text))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if out.Healthy {
		_, err := fmt.Fprintln(w, "healthy: cbgrpc has what it needs here")
		return err
	}
	return nil
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
