"""A user-space packet delayer for kernels without tc netem.

Runs inside a host, bound to an NFQUEUE that an iptables rule feeds with the
peers' packets; each packet is held for the delay (plus uniform jitter) and
then accepted. One thread: packets arrive through ``select`` on the queue's
socket, and a heap orders the releases, so no verdict races another. On
SIGTERM every held packet is released, so healing never turns into loss.

Usage: python delayer.py --queue N --delay-ms D [--jitter-ms J]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import select
import signal
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queue", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, required=True)
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    args = ap.parse_args(argv)

    from netfilterqueue import COPY_META, NetfilterQueue

    held: list[tuple[float, int, Any]] = []
    seq = itertools.count()
    rng = random.Random()
    stopping = False

    def on_packet(pkt: Any) -> None:
        d = args.delay_ms + (
            rng.uniform(-args.jitter_ms, args.jitter_ms) if args.jitter_ms else 0.0
        )
        heapq.heappush(held, (time.monotonic() + max(0.0, d) / 1000.0, next(seq), pkt))

    def on_term(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    nfq = NetfilterQueue()
    nfq.bind(args.queue, on_packet, max_len=20000, mode=COPY_META)
    fd = nfq.get_fd()
    print(f"delaying queue {args.queue} by {args.delay_ms}ms ±{args.jitter_ms}ms", flush=True)
    try:
        while not stopping:
            now = time.monotonic()
            while held and held[0][0] <= now:
                heapq.heappop(held)[2].accept()
            wait = min(0.2, held[0][0] - now) if held else 0.2
            try:
                ready, _, _ = select.select([fd], [], [], max(0.0, wait))
            except InterruptedError:
                continue
            if ready:
                nfq.run(block=False)
    finally:
        while held:
            heapq.heappop(held)[2].accept()
        nfq.unbind()
    return 0


if __name__ == "__main__":
    sys.exit(main())
