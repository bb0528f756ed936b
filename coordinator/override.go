package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Override is a partial [Policy]: the fields an operator set, keyed by
// their Go names ("FailureRatio"), each as canonical text ("0.3", "30s").
// It is what [Controller.SetOverride] stores for one scope or for the
// fleet, and what a Breaker lays over the policy its code passes. The
// zero Override sets nothing. [ParseOverride] and [Override.Set] also read
// a field's name in snake or kebab case and key it by its Go name; a key
// spelt otherwise in the map itself ("min_calls") is refused by
// [Override.Apply], and so by SetOverride, naming the key and the Go name.
type Override map[string]string

// policyField is one field of Policy as an override names and sets it:
// get gives a pointer to it, whose type says how its text reads.
type policyField struct {
	name string
	get  func(*Policy) any
}

// policyFields are Policy's fields in declaration order: the order
// overrides, encodings and fingerprints list them.
var policyFields = []policyField{
	{"Window", func(p *Policy) any { return &p.Window }},
	{"Buckets", func(p *Policy) any { return &p.Buckets }},
	{"MinCalls", func(p *Policy) any { return &p.MinCalls }},
	{"FailureRatio", func(p *Policy) any { return &p.FailureRatio }},
	{"ConsecutiveFailures", func(p *Policy) any { return &p.ConsecutiveFailures }},
	{"SlowCallDuration", func(p *Policy) any { return &p.SlowCallDuration }},
	{"SlowCallRatio", func(p *Policy) any { return &p.SlowCallRatio }},
	{"OpenFor", func(p *Policy) any { return &p.OpenFor }},
	{"MaxOpenFor", func(p *Policy) any { return &p.MaxOpenFor }},
	{"Probes", func(p *Policy) any { return &p.Probes }},
	{"ProbeLease", func(p *Policy) any { return &p.ProbeLease }},
	{"ProbeSuccesses", func(p *Policy) any { return &p.ProbeSuccesses }},
	{"BackoffAfter", func(p *Policy) any { return &p.BackoffAfter }},
	{"RampFor", func(p *Policy) any { return &p.RampFor }},
	{"Throttle", func(p *Policy) any { return &p.Throttle }},
	{"Outliers", func(p *Policy) any { return &p.Outliers }},
}

// separators are what may part the words of a field's name. Built once:
// a Replacer costs tens of microseconds to build, and Encode, which every
// Record runs, looks up every field.
var separators = strings.NewReplacer("_", "", "-", "")

// fieldByName finds a field by its Go name, or by the same words in any
// case with underscores or dashes: "failure_ratio", "open-for". It reads
// what an operator types ([Override.Set]).
func fieldByName(name string) (policyField, error) {
	key := separators.Replace(name)
	for _, f := range policyFields {
		if strings.EqualFold(f.name, key) {
			return f, nil
		}
	}
	return policyField{}, &PolicyError{Field: name, Reason: "is no field of a policy; the fields are " + strings.Join(PolicyFields(), ", ")}
}

// fieldOfKey finds the field a key of an Override names: its Go name
// only, so that every Override spells a field one way, the way Apply,
// Merge, String and the coordinators' stores read it.
func fieldOfKey(key string) (policyField, error) {
	f, err := fieldByName(key)
	if err == nil && f.name != key {
		return f, &PolicyError{Field: key, Reason: "is no key of an Override: the key is the Go name, " + f.name + " (ParseOverride and Override.Set read either)"}
	}
	return f, err
}

// PolicyFields returns the names an [Override] may set, in the order of
// [Policy]'s fields.
func PolicyFields() []string {
	names := make([]string, len(policyFields))
	for i, f := range policyFields {
		names[i] = f.name
	}
	return names
}

// ParseOverride reads assignments "field=value" ("failure_ratio=0.3",
// "OpenFor=30s"): field names as [Override.Set] takes them. "field=" with
// no value removes the field when the override is merged into another
// ([Override.Merge]). An error names the assignment that is wrong and
// wraps [ErrInvalidPolicy].
func ParseOverride(assignments ...string) (Override, error) {
	o := Override{}
	for _, a := range assignments {
		name, value, ok := strings.Cut(a, "=")
		if !ok {
			return nil, &PolicyError{Field: a, Reason: "is not field=value"}
		}
		if err := o.Set(name, value); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Set sets one field of o, named by its Go name or the same words in snake
// or kebab case, to value in canonical form, keyed by its Go name; an
// empty value marks the field for removal by [Override.Merge]. An unknown
// field, or a value that is no duration, integer or number as the field
// wants, is a [*PolicyError] naming it.
// Whether the value works with the rest of the policy is for
// [Override.Apply] to say.
func (o Override) Set(name, value string) error {
	f, err := fieldByName(name)
	if err != nil {
		return err
	}
	value = strings.TrimSpace(value)
	if value == "" {
		o[f.name] = ""
		return nil
	}
	var p Policy
	if err := f.parse(&p, value); err != nil {
		return err
	}
	o[f.name] = f.format(&p)
	return nil
}

func (f policyField) parse(p *Policy, value string) error {
	switch v := f.get(p).(type) {
	case *time.Duration:
		d, err := time.ParseDuration(value)
		if err != nil {
			return invalid(f.name, "must be a duration such as 30s or 1m, got %q", value)
		}
		*v = d
	case *int:
		n, err := strconv.Atoi(value)
		if err != nil {
			return invalid(f.name, "must be a whole number, got %q", value)
		}
		*v = n
	case *float64:
		x, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return invalid(f.name, "must be a number such as 0.5, got %q", value)
		}
		*v = x
	}
	return nil
}

func (f policyField) format(p *Policy) string {
	switch v := f.get(p).(type) {
	case *time.Duration:
		return v.String()
	case *int:
		return strconv.Itoa(*v)
	case *float64:
		return strconv.FormatFloat(*v, 'g', -1, 64)
	}
	return ""
}

// Merge returns o with the fields of next laid over it, each value in
// canonical form ("1s", not "1000ms"), so that every coordinator stores
// and reports the same text; a field next marks for removal (an empty
// value) is removed. A key of next that is no Go name of a field, or a
// value its field cannot parse, is kept as it is for [Override.Apply] to
// refuse. Neither o nor next changes.
func (o Override) Merge(next Override) Override {
	m := make(Override, len(o)+len(next))
	for k, v := range o {
		m[k] = v
	}
	for k, v := range next {
		f, err := fieldOfKey(k)
		switch {
		case err != nil:
			m[k] = v
		case v == "":
			delete(m, k)
		default:
			var p Policy
			if f.parse(&p, v) == nil {
				v = f.format(&p)
			}
			m[k] = v
		}
	}
	return m
}

// Apply returns p with o's fields set, and validates the result as
// [Policy.Validate] does: the error names the field that does not work,
// which may be one o does not set ("MaxOpenFor must be greater than
// OpenFor"), or the first key, in sorted order, that is no Go name of a
// field.
func (o Override) Apply(p Policy) (Policy, error) {
	for _, k := range slices.Sorted(maps.Keys(o)) {
		if _, err := fieldOfKey(k); err != nil {
			return p, err
		}
	}
	for _, f := range policyFields {
		v, ok := o[f.name]
		if !ok || v == "" {
			continue
		}
		if err := f.parse(&p, v); err != nil {
			return p, err
		}
	}
	return p, p.Validate()
}

// String lists o's fields in the order of Policy's, "Field=value"
// separated by spaces, then any key that is no Go name of a field, in
// sorted order; "" when o sets nothing.
func (o Override) String() string {
	var b strings.Builder
	for _, f := range policyFields {
		if v, ok := o[f.name]; ok {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(f.name + "=" + v)
		}
	}
	var unknown []string
	for name := range o {
		if _, err := fieldOfKey(name); err != nil {
			unknown = append(unknown, name+"="+o[name])
		}
	}
	slices.Sort(unknown)
	for _, u := range unknown {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(u)
	}
	return b.String()
}

// Encode writes every field of p as [Override.String] would write an
// override that sets them all: the form in which a coordinator stores the
// policies Records carried (Snapshot.Policies), and what
// [Policy.Fingerprint] digests. Every Record encodes its policy, so it
// writes the fields straight out.
func (p Policy) Encode() string {
	var b strings.Builder
	for i, f := range policyFields {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.name)
		b.WriteByte('=')
		b.WriteString(f.format(&p))
	}
	return b.String()
}

// DecodePolicy reads what [Policy.Encode] wrote. It does not validate: a
// stored policy is reported as it was.
func DecodePolicy(s string) (Policy, error) {
	var p Policy
	for _, a := range strings.Fields(s) {
		name, value, _ := strings.Cut(a, "=")
		f, err := fieldOfKey(name)
		if err != nil {
			return p, fmt.Errorf("an encoded policy: %w", err)
		}
		if err := f.parse(&p, value); err != nil {
			return p, err
		}
	}
	return p, nil
}

// Fingerprint is a short digest of p, the same for equal policies in every
// process: Records carry it, so that a coordinator can tell how many
// different policies its replicas run (Snapshot.Policies).
func (p Policy) Fingerprint() string {
	_, fp := p.Encoded()
	return fp
}

// Encoded returns p's [Policy.Encode] and [Policy.Fingerprint] for the
// price of one encoding: a Record sends both.
func (p Policy) Encoded() (encoding, fingerprint string) {
	encoding = p.Encode()
	sum := sha256.Sum256([]byte(encoding))
	return encoding, hex.EncodeToString(sum[:6])
}
