// etcdctl from etcd's own etcdctl module, at the same version as the server: the
// membership fault's operator hands (member list, add, remove, move-leader).
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() { ctlv3.MustStart() }
