package main

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
)

const environment = `environment: CBCTL_REDIS_ADDR, CBCTL_REDIS_SENTINEL, CBCTL_REDIS_MASTER, CBCTL_REDIS_USERNAME,
CBCTL_REDIS_PASSWORD (the credentials are read from here only), CBCTL_BY, CBCTL_SERVE_TOKEN
`

const exitStatus = `exit status: 0 done (also when the breaker already was in the state asked for);
1 an operational error (Redis unreachable, a script failed, watch refused by Redis);
2 a usage error, or a policy override that would not work (nothing is stored);
3 show, isolate, release, disable or enable of a scope that has no
state (the last four unless --create is given), and policy show or set of one that
has no override either (set unless --create is given); 4 isolate, release, disable
or enable whose change no replica confirmed (in force on the master; run it again
once the replicas are back); 5 list that found scopes whose stored state is unusable
(listed as corrupt, beside the others); 6 doctor that found warnings and no
failure; 7 doctor that found a failure.
`

// writeUsage writes cbctl's help: the commands, and fs, the flags every
// command takes.
func writeUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, "usage: cbctl [flags] COMMAND [flags] [args]\n\n"+
		"Show and control the circuit breakers cbgrpc keeps in Redis, for the whole fleet.\n\ncommands:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(c.name+" "+c.args), c.brief)
	}
	fmt.Fprintf(tw, "  help [COMMAND]\tthis help, or a command's (also: cbctl COMMAND --help)\n")
	tw.Flush()
	fmt.Fprint(w, "\nflags every command takes, before or after the command:\n")
	writeFlags(w, fs, nil, "-h, --help\tprint this help")
	fmt.Fprint(w, "\n"+environment+"\n"+exitStatus+"\nRun \"cbctl help COMMAND\" for the flags of a command.\n")
}

// writeFlags writes the flags of fs that only accepts (all when nil) as
// the docs write them, "--addr HOST:PORT", then the rows of more
// ("FLAG\tUSAGE").
func writeFlags(w io.Writer, fs *flag.FlagSet, only func(name string) bool, more ...string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		if only != nil && !only(f.Name) {
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		if short, ok := argNames[arg]; ok {
			arg = short
		}
		left := "--" + f.Name
		if arg != "" {
			left += " " + arg
		}
		if def := defaultText(f); def != "" {
			usage += " (default " + def + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", left, usage)
	})
	for _, row := range more {
		fmt.Fprintf(tw, "  %s\n", row)
	}
	tw.Flush()
}

// argNames are the docs' names of the arguments package flag names after
// their type.
var argNames = map[string]string{"duration": "D", "int": "N", "string": "TEXT"}

// defaultText is f's default for the help, "" when it is the zero value,
// which says nothing.
func defaultText(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return ""
	}
	if g, ok := f.Value.(flag.Getter); ok {
		if _, ok := g.Get().(string); ok {
			return strconv.Quote(f.DefValue)
		}
	}
	return f.DefValue
}

func countFlags(fs *flag.FlagSet) int {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// flagDash finds the flag in the errors of package flag, which write it
// with one dash.
var flagDash = regexp.MustCompile(`^(flag provided but not defined: |flag needs an argument: |invalid (?:boolean )?value "(?:[^"\\]|\\.)*" for (?:flag )?)-`)

// flagError is err, from package flag, with the flag written as the docs
// and the help write it: "--nope".
func flagError(err error) string {
	return flagDash.ReplaceAllString(err.Error(), "${1}--")
}

// version is the module version cbctl was built from: a release tag with
// "go install ...@v1.2.3", a pseudo-version or "(devel)" otherwise.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
