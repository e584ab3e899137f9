"""``harness.api`` is the documented import path: its ``__all__`` and its names stay in sync."""

from __future__ import annotations

import inspect

import harness.api as api


def test_all_names_exist_and_every_public_name_is_exported():
    assert len(api.__all__) == len(set(api.__all__))
    for name in api.__all__:
        assert hasattr(api, name), name
    public = {
        n
        for n, v in vars(api).items()
        if not n.startswith("_")
        and not inspect.ismodule(v)
        and n not in {"annotations", "Any", "Callable", "Mapping"}
    }
    assert public == set(api.__all__)


def test_exported_roles_are_documented():
    for name in (
        "DB",
        "Killable",
        "Client",
        "Generator",
        "Workload",
        "Model",
        "Remote",
        "Op",
        "get_db",
        "get_workload",
        "get_model",
    ):
        assert inspect.getdoc(getattr(api, name)), f"{name} has no docstring"
    assert "idempotent" in api.__doc__.lower() or "idempotency" in api.__doc__.lower()
    assert {
        "splitbrain.dbs",
        "splitbrain.workloads",
        "splitbrain.models",
    } <= set(api.ENTRY_POINT_GROUPS.values())
