"""The key-value state machine and the entry bodies that drive it (spec §8).

Bodies are msgpack maps: ``{"op":"append","p":X}``, ``{"op":"put","k","v"}``,
``{"op":"cas","k","old","new"}``, ``{"op":"read","k"}`` or ``{"op":"read","ks"}`` (one
read of many keys at one log position); a NOOP entry has an empty body. The map is
rebuilt at startup by replaying the committed log (R4), so apply must be deterministic:
CAS is decided here, at apply time, not when it is proposed.
"""

from __future__ import annotations

from typing import Any

from node_impl.store import MAGIC_NOOP, Entry, decode_body, encode_body

__all__ = [
    "KV",
    "is_plain_append",
    "body_append",
    "body_put",
    "body_cas",
    "body_read",
    "body_read_keys",
    "entry_view",
    "decode",
]


# msgpack of the map {"op": "append", "p": ...} up to the payload: appends are the hot
# path, so their bodies are built by concatenation, and apply skips decoding them.
_APPEND_PREFIX = b"\x82\xa2op\xa6append\xa1p"


def body_append(payload: Any) -> bytes:
    return _APPEND_PREFIX + encode_body(payload)


def body_put(key: str, value: Any) -> bytes:
    return encode_body({"op": "put", "k": key, "v": value})


def body_cas(key: str, old: Any, new: Any) -> bytes:
    return encode_body({"op": "cas", "k": key, "old": old, "new": new})


def body_read(key: str) -> bytes:
    return encode_body({"op": "read", "k": key})


def body_read_keys(keys: list[str]) -> bytes:
    """One read of many keys (read mode ``log``): one entry, so one commit, for all of them."""
    return encode_body({"op": "read", "ks": list(keys)})


def decode(e: Entry) -> Any:
    """The decoded body, or None for a NOOP or an undecodable body."""
    if e.magic == MAGIC_NOOP or not e.body:
        return None
    try:
        return decode_body(e.body)
    except Exception:
        return None


def entry_view(e: Entry) -> list:
    """[index, term, kind, payload] as the client API returns entries."""
    if e.magic == MAGIC_NOOP:
        return [e.index, e.term, "noop", None]
    obj = decode(e)
    op = obj.get("op") if isinstance(obj, dict) else None
    if op == "append":
        return [e.index, e.term, "append", obj.get("p")]
    if op in ("put", "cas"):
        return [e.index, e.term, "kv", obj]
    if op == "read":
        return [e.index, e.term, "read", obj]
    if op == "config":  # docs/membership.md: a configuration entry
        return [
            e.index,
            e.term,
            "config",
            {"voters": obj.get("voters"), "learners": obj.get("learners")},
        ]
    # Neither a body this node could have written nor one it can read (a torn or flipped
    # record a recovery kept): said as such, with its bytes, never passed off as an append.
    return [e.index, e.term, "undecodable", e.body.hex()]


def is_plain_append(e: Entry) -> bool:
    """True for an append body, which never changes the kv map (no decode needed)."""
    return e.body.startswith(_APPEND_PREFIX)


class KV:
    """An in-memory map; ``apply`` returns the op's result for the waiting client."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def apply(self, obj: Any) -> dict | None:
        if not isinstance(obj, dict):
            return None
        op = obj.get("op")
        if op == "append":
            return None
        if op == "read" and "ks" in obj:
            keys = obj.get("ks")
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                return None
            return {"values": self.read_keys(keys)}
        key = obj.get("k")
        if not isinstance(key, str):
            return None
        if op == "put":
            self.data[key] = obj.get("v")
            return {}
        if op == "cas":
            found = key in self.data
            cur = self.data.get(key)
            if found and cur == obj.get("old"):
                self.data[key] = obj.get("new")
                return {"ok": True, "value": obj.get("new")}
            return {"ok": False, "value": cur}
        if op == "read":
            return self.read(key)
        return None

    def read(self, key: str) -> dict:
        return {"found": key in self.data, "value": self.data.get(key)}

    def read_keys(self, keys: list[str]) -> list[dict]:
        """``read`` of each key, in order, all from the same state."""
        return [self.read(k) for k in keys]
