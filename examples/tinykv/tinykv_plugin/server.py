#!/usr/bin/env python3
"""tinykv: a toy replicated-by-forwarding key-value server that splitbrain knows nothing about.

The first node of --peers is the leader and holds the data (an fsync'd log in
--data-dir, replayed at start); any other node forwards each request to it.
One request per line, one answer per line, values are JSON texts:

    GET k          -> OK <value>  | NIL
    PUT k v        -> OK v
    CAS k old new  -> OK new | FAIL <current>
    anything wrong -> ERR <why>   (the request may or may not have happened)
"""
import argparse
import json
import os
import socket
import socketserver
import threading

ap = argparse.ArgumentParser()
ap.add_argument("--node", required=True)
ap.add_argument("--peers", required=True)  # n1=host:port,n2=host:port,...
ap.add_argument("--data-dir", required=True)
args = ap.parse_args()
peers = [p.split("=", 1) for p in args.peers.split(",")]
leader_name, leader_addr = peers[0][0], peers[0][1].rsplit(":", 1)
me = dict(peers)[args.node].rsplit(":", 1)
lock = threading.Lock()
data = {}
log_path = os.path.join(args.data_dir, "kv.log")
if os.path.exists(log_path):
    with open(log_path) as f:
        for line in f:
            if line.endswith("\n"):  # a torn last line never got an answer
                k, v = line.split(" ", 1)
                data[k] = v.strip()
log = open(log_path, "a")  # noqa: SIM115 (open for the life of the server)


def apply(line):
    parts = line.split()
    if parts[:1] == ["GET"] and len(parts) == 2:
        return "OK " + data[parts[1]] if parts[1] in data else "NIL"
    if parts[:1] == ["PUT"] and len(parts) == 3:
        k, v = parts[1], parts[2]
    elif parts[:1] == ["CAS"] and len(parts) == 4:
        k, old, v = parts[1:]
        if k not in data or json.loads(data[k]) != json.loads(old):
            return "FAIL " + data.get(k, "null")
    else:
        return "ERR bad request"
    log.write(f"{k} {v}\n")
    log.flush()
    os.fsync(log.fileno())
    data[k] = v
    return "OK " + v


def forward(line):
    try:
        with socket.create_connection((leader_addr[0], int(leader_addr[1])), timeout=2) as s:
            s.sendall(line.encode() + b"\n")
            answer = s.makefile().readline().strip()
            return answer or "ERR leader closed the connection"
    except OSError as e:
        return f"ERR leader unreachable: {e}"


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for raw in self.rfile:
            line = raw.decode().strip()
            if args.node == leader_name:
                with lock:
                    answer = apply(line)
            else:
                answer = forward(line)
            self.wfile.write(answer.encode() + b"\n")


socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer.daemon_threads = True
socketserver.ThreadingTCPServer((me[0], int(me[1])), Handler).serve_forever()
