// nats-server from the server package of github.com/nats-io/nats-server/v2 at the version
// the run asks for (harness/dbs/nats.py, harness/dbs/gobuild.py). The module's own main
// package cannot be imported, so this is its few lines again: the same command line
// (-c FILE, --version, ...) parsed by the server's own ConfigureOptions, then the server
// run until a signal stops it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	fs := flag.NewFlagSet("nats-server", flag.ExitOnError)
	opts, err := server.ConfigureOptions(fs, os.Args[1:],
		server.PrintServerAndExit, fs.Usage, server.PrintTLSHelpAndDie)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nats-server: %v\n", err)
		os.Exit(1)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nats-server: %v\n", err)
		os.Exit(1)
	}
	s.ConfigureLogger()
	if err := server.Run(s); err != nil {
		fmt.Fprintf(os.Stderr, "nats-server: %v\n", err)
		os.Exit(1)
	}
	s.WaitForShutdown()
}
