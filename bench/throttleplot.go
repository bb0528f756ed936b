package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteThrottleSVG draws a run: calls offered, admitted and accepted per
// second over time, the dependency's capacity dashed, as a standalone
// SVG with no script and no font beyond the reader's sans-serif.
func WriteThrottleSVG(w io.Writer, run ThrottleRun, title string) error {
	const (
		width, height          = 720, 320
		left, right, top, base = 56, 150, 36, 276 // plot area: x in [left, width-right], y in [top, base]
	)
	cfg := run.Config
	n := len(run.Seconds)
	offered := cfg.Rate * float64(cfg.Replicas)
	ymax := niceCeil(1.1 * offered)
	x := func(s float64) float64 { return left + s*float64(width-left-right)/float64(max(n, 1)) }
	y := func(v float64) float64 { return base - v*float64(base-top)/ymax }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, escape(title))
	// The overload, shaded.
	over0, over1 := cfg.OverloadAt.Seconds(), cfg.RecoverAt.Seconds()
	fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#fbe9e7"/>`+"\n", x(over0), top, x(over1)-x(over0), base-top)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#bf360c">dependency serves %.0f%% of the offered load</text>`+"\n", x(over0)+4, top+14, 100*cfg.Capacity)
	// Axes and grid.
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, width-right, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, y(v)+4, v)
	}
	step := max(1, n/10)
	for s := 0; s <= n; s += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x(float64(s)), base+16, s)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">seconds</text>`+"\n", x(float64(n)/2), base+34)
	fmt.Fprintf(&b, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">calls per second</text>`+"\n", float64(top+base)/2)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#333"/><line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#333"/>`+"\n",
		left, width-right, base, base, left, left, top, base)
	// The capacity during the overload.
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#bf360c" stroke-dasharray="4 3"/>`+"\n",
		x(over0), x(over1), y(cfg.Capacity*offered), y(cfg.Capacity*offered))
	series := []struct {
		name, color string
		v           func(ThrottleSecond) int64
	}{
		{"offered", "#9e9e9e", func(s ThrottleSecond) int64 { return s.Offered }},
		{"admitted", "#1565c0", func(s ThrottleSecond) int64 { return s.Admitted }},
		{"accepted", "#2e7d32", func(s ThrottleSecond) int64 { return s.Accepted }},
	}
	for i, se := range series {
		var pts []string
		for s, sec := range run.Seconds {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(s)+0.5), y(float64(se.v(sec)))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", se.color, strings.Join(pts, " "))
		ly := top + 20 + 20*i
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			width-right+12, width-right+36, ly, ly, se.color, width-right+42, ly+4, se.name)
	}
	ly := top + 20 + 20*len(series)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#bf360c" stroke-dasharray="4 3"/><text x="%d" y="%d">capacity</text>`+"\n",
		width-right+12, width-right+36, ly, ly, width-right+42, ly+4)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// ThrottleSummary is the mean per second of the seconds of run in [from,
// to).
func ThrottleSummary(run ThrottleRun, from, to time.Duration) (offered, admitted, accepted, tripped float64) {
	lo, hi := int(from/time.Second), min(int(to/time.Second), len(run.Seconds))
	if hi <= lo {
		return 0, 0, 0, 0
	}
	for _, s := range run.Seconds[lo:hi] {
		offered, admitted, accepted = offered+float64(s.Offered), admitted+float64(s.Admitted), accepted+float64(s.Accepted)
		tripped += float64(s.Tripped)
	}
	k := float64(hi - lo)
	return offered / k, admitted / k, accepted / k, tripped / k
}

// RecoveredAfter is how long after cfg.RecoverAt the run admitted at
// least share of the offered calls in every second that followed, to the
// second; false if it never did before the run ended.
func RecoveredAfter(run ThrottleRun, share float64) (time.Duration, bool) {
	from := int(run.Config.RecoverAt / time.Second)
	at := -1
	for i := len(run.Seconds) - 1; i >= from; i-- {
		s := run.Seconds[i]
		if float64(s.Admitted) < share*float64(s.Offered) {
			break
		}
		at = i
	}
	if at < 0 {
		return 0, false
	}
	return time.Duration(at-from) * time.Second, true
}
