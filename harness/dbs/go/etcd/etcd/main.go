// The etcd server binary, built from etcd's own server module at the version the run
// asks for (harness/dbs/gobuild.py): nothing here but the call of its entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
