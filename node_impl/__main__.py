"""``python -m node_impl``: run one node until SIGTERM/SIGINT.

Exit codes: 0 after a clean stop, 1 when the node cannot start (a port is taken,
the data dir is unreadable), 2 for bad arguments (unknown bug, missing --ha-master).
"""

from __future__ import annotations

import asyncio
import signal
import sys

from node_impl.broker import BrokerNode
from node_impl.config import ConfigError, NodeConfig, build_parser, parse_args
from node_impl.ha import HANode
from node_impl.node import Node

__all__ = ["main", "run_node"]


async def run_node(cfg: NodeConfig) -> None:
    # mode dispatch: classic master/slave lives in node_impl/ha.py
    # mode broker (node_impl/broker.py) is the DLedger node plus the broker layer
    node: Node | HANode = (HANode(cfg) if cfg.mode == "ha"
                           else BrokerNode(cfg) if cfg.mode == "broker" else Node(cfg))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await node.start()
    except BaseException:
        await node.stop()
        raise
    try:
        await stop.wait()
    finally:
        await node.stop()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if "-h" in args or "--help" in args:
        build_parser().print_help()
        return 0
    try:
        cfg = parse_args(args)
    except ConfigError as e:
        print(f"node_impl: error: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(run_node(cfg))
    except KeyboardInterrupt:
        return 0
    except OSError as e:
        print(f"node_impl: error: {cfg.node_id}: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # store recovery or state-file problems
        print(f"node_impl: error: {cfg.node_id}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
