package coordinator

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseOverride(t *testing.T) {
	for _, c := range []struct {
		in    []string
		want  string // Override.String; "" with field naming an error
		field string
	}{
		{[]string{"failure_ratio=0.30", "OpenFor=30000ms"}, "FailureRatio=0.3 OpenFor=30s", ""},
		{[]string{"open-for=1m", "MINCALLS=7", "throttle=2"}, "MinCalls=7 OpenFor=1m0s Throttle=2", ""},
		{[]string{"min_calls="}, "MinCalls=", ""}, // marks MinCalls for removal
		{[]string{"min_calls"}, "", "min_calls"},
		{[]string{"bogus=1"}, "", "bogus"},
		{[]string{"open_for=soon"}, "", "OpenFor"},
		{[]string{"buckets=1.5"}, "", "Buckets"},
		{[]string{"failure_ratio=NaN"}, "", "FailureRatio"},
	} {
		o, err := ParseOverride(c.in...)
		if c.field != "" {
			var pe *PolicyError
			if !errors.As(err, &pe) || pe.Field != c.field || !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("ParseOverride(%q) = %v, %v; want an invalid policy naming %s", c.in, o, err, c.field)
			}
			continue
		}
		if err != nil || o.String() != c.want {
			t.Errorf("ParseOverride(%q) = %q, %v; want %q", c.in, o.String(), err, c.want)
		}
	}
}

func TestOverrideMergeAndApply(t *testing.T) {
	o := Override{"MinCalls": "7", "OpenFor": "30s"}.Merge(Override{"MinCalls": "", "Probes": "1"})
	if got := o.String(); got != "OpenFor=30s Probes=1" {
		t.Errorf("Merge: %q; want MinCalls removed, Probes added", got)
	}
	p, err := o.Apply(DefaultPolicy())
	want := DefaultPolicy()
	want.OpenFor, want.Probes = 30*time.Second, 1
	if err != nil || p != want {
		t.Errorf("Apply = %+v, %v; want %+v", p, err, want)
	}
	// Values come out canonical, however they went in, so that every
	// coordinator stores and reports the same text; junk stays for Apply
	// to refuse.
	if got := (Override{}).Merge(Override{"OpenFor": "1000ms", "MinCalls": "junk"}).String(); got != "MinCalls=junk OpenFor=1s" {
		t.Errorf("Merge of 1000ms and junk: %q; want OpenFor=1s and MinCalls=junk", got)
	}
	var pe *PolicyError
	if _, err := (Override{"OpenFor": "2m"}).Apply(DefaultPolicy()); !errors.As(err, &pe) || pe.Field != "MaxOpenFor" {
		t.Errorf("an OpenFor past MaxOpenFor: %v; want an error naming MaxOpenFor", err)
	}
}

// Encode writes what an override setting every field would write, reads
// back as the same policy, and the fingerprint follows it.
func TestPolicyEncoding(t *testing.T) {
	p := DefaultPolicy()
	p.SlowCallDuration, p.SlowCallRatio, p.RampFor, p.Throttle, p.FailureRatio = 1500*time.Millisecond, 0.25, time.Minute, 2.5, 0.75
	enc := p.Encode()
	all, err := ParseOverride(strings.Fields(enc)...)
	if err != nil || all.String() != enc || len(all) != len(PolicyFields()) {
		t.Errorf("Encode = %q; want every field, as Override.String writes them (%q, %v)", enc, all.String(), err)
	}
	if back, err := DecodePolicy(enc); err != nil || back != p {
		t.Errorf("DecodePolicy(%q) = %+v, %v; want %+v", enc, back, err, p)
	}
	q := p
	q.MinCalls++
	if p.Fingerprint() != p.Fingerprint() || p.Fingerprint() == q.Fingerprint() || len(p.Fingerprint()) != 12 {
		t.Errorf("fingerprints %s, %s; want 12 hex digits, the same for equal policies only", p.Fingerprint(), q.Fingerprint())
	}
}

// An Override's keys are Go names: ParseOverride keys "min_calls=50" as
// MinCalls, and a key spelt otherwise in the map is refused by Apply,
// naming it and the Go name, even when Merge is asked to remove it.
func TestOverrideKeysAreGoNames(t *testing.T) {
	if o, err := ParseOverride("min_calls=50"); err != nil || len(o) != 1 || o["MinCalls"] != "50" {
		t.Errorf("ParseOverride(min_calls=50) = %v, %v; want the key MinCalls", o, err)
	}
	stored := Override{"MinCalls": "8"}
	for _, o := range []Override{
		{"min_calls": "50"},
		stored.Merge(Override{"min_calls": "50"}),
		stored.Merge(Override{"min_calls": ""}),
	} {
		_, err := o.Apply(DefaultPolicy())
		var pe *PolicyError
		if !errors.As(err, &pe) || pe.Field != "min_calls" || !strings.Contains(err.Error(), "MinCalls") {
			t.Errorf("Apply of %q = %v; want an invalid policy naming min_calls and MinCalls", o.String(), err)
		}
	}
	if got := (Override{"MinCalls": "8", "min_calls": "50"}).String(); got != "MinCalls=8 min_calls=50" {
		t.Errorf("String = %q; want the key that is no Go name listed after the fields", got)
	}
}
