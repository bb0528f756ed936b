// Command cbfleet is one replica of a fleet for the fault tests: see
// package internal/cbfleet for its flags, commands and reports.
package main

import (
	"fmt"
	"os"

	"github.com/cbgrpc/cbgrpc/internal/cbfleet"
)

func main() {
	cfg, err := cbfleet.ParseFlags(os.Args[0], os.Args[1:])
	if err == nil {
		err = cbfleet.Run(cfg, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
