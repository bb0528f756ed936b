package implement

import (
	"strings"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Describe is the Reason of the transition that op, one of the
// [coordinator.Controller]'s commands ("isolate", "release", "disable",
// "enable"), makes with note n: "isolated by alice for 10m0s: payments
// outage", "enabled", ...
func Describe(n coordinator.Note, op string) string {
	verb := map[string]string{"isolate": "isolated", "release": "released", "disable": "disabled", "enable": "enabled"}[op]
	if verb == "" {
		verb = op
	}
	var b strings.Builder
	b.WriteString(verb)
	if n.By != "" {
		b.WriteString(" by " + n.By)
	}
	if n.For > 0 {
		b.WriteString(" for " + n.For.Truncate(time.Millisecond).String())
	}
	if n.Reason != "" {
		b.WriteString(": " + n.Reason)
	}
	return b.String()
}

// IsolationEnded is the Reason of the transition an isolation for a set
// time makes when it ends by itself.
const IsolationEnded = "isolation ended"
