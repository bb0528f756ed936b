package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
	cbredis "github.com/cbgrpc/cbgrpc/coordinator/redis"
)

// policyHelp is what cbctl policy --help says beyond the synopsis.
var policyHelp = `  cbctl policy show SCOPE                    the fleet default, the scope's override, and the
                                             policies the scope's Records carried in the last window
  cbctl policy show --default                the fleet default
  cbctl policy set SCOPE field=value...      merge fields into the scope's override ("field=" removes one)
  cbctl policy set --default field=value...  the same for the fleet default: every scope of --prefix
  cbctl policy reset SCOPE|--default         remove the override

Breakers lay the fleet default, then the scope's override, over the policy their
code passes, within a second. Fields, by their Go names or in snake case:
  ` + strings.Join(coordinator.PolicyFields()[:7], ", ") + `,
  ` + strings.Join(coordinator.PolicyFields()[7:], ", ") + `;
values are durations (30s), whole numbers or ratios (0.5). An override that would not
make a valid policy over DefaultPolicy (and the fleet default) is refused, naming the
field, with exit status 2, and nothing is stored. set prints the layers now stored and
the policy they make over DefaultPolicy, with the fingerprint cbctl show reports for it.
Like isolate, set and reset wait for the master's replicas, and exit with status 4
when none confirmed the change.
`

// moreHelp is what a command's help says beyond its synopsis and brief.
var moreHelp = map[string]string{"policy": policyHelp, "doctor": doctorHelp}

func cmdPolicy(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	fleet := fs.Bool("default", false, "the fleet default, for every scope of --prefix, instead of a SCOPE")
	var n coordinator.Note
	fs.StringVar(&n.Reason, "reason", "", "set and reset: why, for the note")
	fs.StringVar(&n.By, "by", e.defaultBy(), "set and reset: `NAME` of who acts, for the note ($CBCTL_BY, else $USER)")
	create := fs.Bool("create", false, "set: override a scope that has neither state nor override instead of failing with exit status 3")
	e.replicaFlags(fs)
	var (
		sub    string
		target coordinator.Target
		o      coordinator.Override
	)
	ctx, cancel, c, p, _, err := e.setup(ctx, args, func(pos []string) error {
		if len(pos) == 0 || (pos[0] != "show" && pos[0] != "set" && pos[0] != "reset") {
			return usageErr("want show, set or reset, then SCOPE or --default (see cbctl policy --help)")
		}
		sub, pos = pos[0], pos[1:]
		target = coordinator.FleetDefault
		if !*fleet {
			if len(pos) == 0 {
				return usageErr("%s: want a SCOPE, or --default for the fleet default", sub)
			}
			if err := scopeArg(pos[0]); err != nil {
				return err
			}
			target, pos = coordinator.ScopeTarget(pos[0]), pos[1:]
		}
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		switch {
		case sub == "show" && (given["by"] || given["reason"]):
			return usageErr("show: --by and --reason go with set and reset")
		case given["create"] && (sub != "set" || target.Fleet):
			return usageErr("--create goes with set SCOPE")
		case sub != "set" && len(pos) > 0:
			return usageErr("%s takes no field=value, got %q", sub, pos)
		case sub == "set" && len(pos) == 0:
			return usageErr("set: want at least one field=value, such as failure_ratio=0.3 (see cbctl policy --help)")
		}
		var err error
		if o, err = coordinator.ParseOverride(pos...); err != nil {
			return usageErr("%v", err)
		}
		if err := n.Validate("override"); err != nil {
			return noteUsageErr(err)
		}
		return e.checkReplicaFlags()
	})
	if err != nil {
		return err
	}
	defer cancel()
	if sub == "show" {
		return showPolicy(ctx, e, c, p, target)
	}
	before, err := c.Overrides(ctx, target)
	if err != nil {
		return err
	}
	if sub == "set" && !target.Fleet {
		// A scope once overridden is known, whatever its state.
		if _, err := snapshotOf(ctx, c, p, target.Scope, *create || before.Scope.Version != 0,
			"; check the name with cbctl list, or give --create to set its override anyway"); err != nil {
			return err
		}
	}
	var after coordinator.Overrides
	if sub == "set" {
		after, err = c.SetOverride(ctx, target, o, n)
	} else {
		after, err = c.ResetOverride(ctx, target, n)
	}
	if errors.Is(err, coordinator.ErrInvalidPolicy) || errors.Is(err, coordinator.ErrInvalidNote) {
		return &cmdError{exitUsage, err}
	}
	if err != nil {
		return err
	}
	changed := layerOf(after, target).Version != layerOf(before, target).Version
	res, _, applyErr := after.Apply(p)
	if e.json {
		out := layersJSON(target, after)
		out.Changed = &changed
		out.Result = &resultPolicyJSON{Fingerprint: res.Fingerprint(), Policy: policyMap(res)}
		if applyErr != nil {
			out.Result.Error = applyErr.Error()
		}
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
		return e.confirmed(after.Replicas)
	}
	if !changed && sub == "reset" {
		fmt.Fprintf(e.stdout, "unchanged: %s has no override\n", targetText(target))
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 1, ' ', 0)
	if !changed {
		fmt.Fprintf(tw, "unchanged: %s already has these fields\n", targetText(target))
	}
	writeLayers(tw, target, after)
	fmt.Fprintf(tw, "result:\t%s\n", res.Encode())
	if applyErr != nil {
		fmt.Fprintf(tw, "\tover DefaultPolicy, %v\n", applyErr)
	}
	fmt.Fprintf(tw, "fingerprint:\t%s (as cbctl show reports it where the code passes DefaultPolicy)\n", res.Fingerprint())
	if err := tw.Flush(); err != nil {
		return err
	}
	return e.confirmed(after.Replicas)
}

func showPolicy(ctx context.Context, e *env, c *cbredis.Coordinator, p coordinator.Policy, target coordinator.Target) error {
	ov, err := c.Overrides(ctx, target)
	if err != nil {
		return err
	}
	if target.Fleet {
		if e.json {
			return writeJSON(e.stdout, layersJSON(target, ov))
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 1, ' ', 0)
		writeLayers(tw, target, ov)
		return tw.Flush()
	}
	s, err := snapshotOf(ctx, c, p, target.Scope, ov.Scope.Version != 0,
		" and it has no override; cbctl policy show --default shows the fleet default")
	if err != nil {
		return err
	}
	if e.json {
		out := layersJSON(target, ov)
		seen := len(s.Policies)
		out.PoliciesSeen = &seen
		out.Policies = make([]carriedPolicyJSON, len(s.Policies))
		for i, sp := range s.Policies {
			out.Policies[i] = toSeenJSON(sp)
			out.Policies[i].Policy = policyMap(sp.Policy)
		}
		if seen > 0 {
			// in_force is policies[0] without the fields the list holds.
			f := toSeenJSON(s.Policies[0])
			out.InForce = &f
		}
		return writeJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 1, ' ', 0)
	writeLayers(tw, target, ov)
	if len(s.Policies) == 0 {
		fmt.Fprintf(tw, "in force:\tunknown: no Record carried a policy in the last window\n")
		fmt.Fprintf(tw, "policies seen:\t0\n")
		return tw.Flush()
	}
	now := s.Policies[0]
	line := fmt.Sprintf("%s (%v), last recorded %s", quoteText(now.Fingerprint), now.Source, formatTime(now.At))
	if last := latest(ov.Fleet, ov.Scope); now.At.Before(last) {
		// Records carry the policy a Breaker ran when it sent them: none
		// has come since the change, so none can show it yet.
		line += "; no Record since the override changed at " + formatTime(last)
	}
	fmt.Fprintf(tw, "in force:\t%s\n", line)
	fmt.Fprintf(tw, "\t%s\n", now.Policy.Encode())
	if len(s.Policies) == 1 {
		fmt.Fprintf(tw, "policies seen:\t1 in the last window\n")
		return tw.Flush()
	}
	fmt.Fprintf(tw, "policies seen:\t%d in the last window: replicas differ, or the policy changed in it\n", len(s.Policies))
	for _, sp := range s.Policies[1:] {
		fmt.Fprintf(tw, "\t%s (%v), last recorded %s: %s\n", quoteText(sp.Fingerprint), sp.Source, formatTime(sp.At), differs(sp.Policy, now.Policy))
	}
	return tw.Flush()
}

// layerOf is target's own layer of o.
func layerOf(o coordinator.Overrides, target coordinator.Target) coordinator.PolicyLayer {
	if target.Fleet {
		return o.Fleet
	}
	return o.Scope
}

// latest is when the last of the layers changed.
func latest(layers ...coordinator.PolicyLayer) (t time.Time) {
	for _, l := range layers {
		if l.At.After(t) {
			t = l.At
		}
	}
	return t
}

func targetText(t coordinator.Target) string {
	if t.Fleet {
		return "the fleet default"
	}
	return "scope " + quoteScope(t.Scope)
}

// writeLayers writes the fleet default and, for a scope, its override,
// each with who changed it last, when and why.
func writeLayers(w io.Writer, target coordinator.Target, o coordinator.Overrides) {
	if !target.Fleet {
		fmt.Fprintf(w, "scope:\t%s\n", quoteScope(target.Scope))
	}
	layer := func(name string, l coordinator.PolicyLayer) {
		fields := l.Override.String()
		if fields == "" {
			fields = "none"
		}
		fmt.Fprintf(w, "%s:\t%s\n", name, quoteText(fields))
		if l.Version == 0 {
			return
		}
		meta := fmt.Sprintf("version %d at %s", l.Version, formatTime(l.At))
		if l.By != "" {
			meta += " by " + quoteText(l.By)
		}
		if l.Reason != "" {
			meta += ": " + quoteText(l.Reason)
		}
		fmt.Fprintf(w, "\t%s\n", meta)
	}
	layer("fleet default", o.Fleet)
	if !target.Fleet {
		layer("scope override", o.Scope)
	}
}

// differs lists the fields in which p differs from q, "Field=value".
func differs(p, q coordinator.Policy) string {
	// Encode writes every field, in one order.
	a, b := strings.Fields(p.Encode()), strings.Fields(q.Encode())
	var d []string
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			d = append(d, a[i])
		}
	}
	return strings.Join(d, " ")
}

// policyMap is every field of p as an override writes it.
func policyMap(p coordinator.Policy) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Fields(p.Encode()) {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// policyJSON is what policy show, set and reset print with --json. The
// parts about a scope are absent for --default; in_force, policies_seen
// and policies come with show SCOPE, changed and result with set and
// reset.
type policyJSON struct {
	Scope         *string             `json:"scope,omitempty"`
	Changed       *bool               `json:"changed,omitempty"`
	FleetDefault  layerJSON           `json:"fleet_default"`
	ScopeOverride *layerJSON          `json:"scope_override,omitempty"`
	Result        *resultPolicyJSON   `json:"result,omitempty"`
	InForce       *carriedPolicyJSON  `json:"in_force,omitempty"` // policies[0] without its fields; absent when no Record came in the last window
	PoliciesSeen  *int                `json:"policies_seen,omitempty"`
	Policies      []carriedPolicyJSON `json:"policies,omitempty"`
}

// layerJSON is a coordinator.PolicyLayer: override {} when there is none.
type layerJSON struct {
	Override map[string]string `json:"override"`
	Version  uint64            `json:"version"` // 0: never set
	By       string            `json:"by"`
	Reason   string            `json:"reason"`
	At       string            `json:"at,omitempty"`
}

// resultPolicyJSON is the policy the layers make over DefaultPolicy (with
// --window and --buckets); error says which layer was left out, if one
// would make it invalid.
type resultPolicyJSON struct {
	Fingerprint string            `json:"fingerprint"`
	Policy      map[string]string `json:"policy"`
	Error       string            `json:"error,omitempty"`
}

// carriedPolicyJSON is a coordinator.CarriedPolicy; only the list of policy
// show holds its fields.
type carriedPolicyJSON struct {
	Fingerprint string            `json:"fingerprint"`
	Source      string            `json:"source"` // "code", "fleet default" or "scope override"
	At          string            `json:"at"`     // the last Record that carried it
	Policy      map[string]string `json:"policy,omitempty"`
}

func toSeenJSON(sp coordinator.CarriedPolicy) carriedPolicyJSON {
	return carriedPolicyJSON{Fingerprint: sp.Fingerprint, Source: sp.Source.String(), At: jsonTime(sp.At)}
}

func toLayerJSON(l coordinator.PolicyLayer) layerJSON {
	o := map[string]string{}
	for k, v := range l.Override {
		o[k] = v
	}
	return layerJSON{Override: o, Version: l.Version, By: l.By, Reason: l.Reason, At: jsonTime(l.At)}
}

func layersJSON(target coordinator.Target, o coordinator.Overrides) policyJSON {
	out := policyJSON{FleetDefault: toLayerJSON(o.Fleet)}
	if !target.Fleet {
		scope, l := target.Scope, toLayerJSON(o.Scope)
		out.Scope, out.ScopeOverride = &scope, &l
	}
	return out
}
