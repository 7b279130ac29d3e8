// Command etcd is etcd's own server, as the etcd binary runs it (go.etcd.io/etcd/server/v3's etcdmain.Main),
// built from the release pinned in go.mod, for the control plane Claimline's end-to-end tests start.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
