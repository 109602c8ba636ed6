"""`Client` and `AsyncClient`, `Work` and `AsyncWork`: the same public methods, the same
signatures (with `async` and the `Async` prefixes taken out)."""

from __future__ import annotations

import inspect
import re

import pytest

from work_ledger.client import AsyncClaiming, AsyncClient, AsyncWork, Claiming, Client, Work

# The one name that differs on purpose: httpx's and asyncio's own `aclose`.
RENAMED = {"aclose": "close"}


def surface(cls: type) -> dict[str, str]:
    """Public methods and properties by their sync name, each with its signature."""
    found = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") and name not in ("__init__", "__enter__", "__aenter__"):
            continue
        sync_name = RENAMED.get(name, name.replace("__aenter__", "__enter__"))
        if isinstance(member, property):
            found[sync_name] = "property"
        elif callable(member):
            text = str(inspect.signature(member))
            text = re.sub(r"\bAwaitable\[(\w+)\]", r"\1", text)
            found[sync_name] = re.sub(r"\bAsync", "", text)
    return found


@pytest.mark.parametrize(
    ("sync", "aio"),
    [(Client, AsyncClient), (Work, AsyncWork), (Claiming, AsyncClaiming)],
    ids=["Client", "Work", "Claiming"],
)
def test_sync_and_async_surfaces_are_the_same(sync: type, aio: type) -> None:
    """Every public method of one side exists on the other, with the same signature."""
    assert surface(sync) == surface(aio)


def test_every_async_method_is_a_coroutine_or_async_iterator_where_sync_does_io() -> None:
    """Whatever sends a request is awaited on the async side: nothing sync slipped through."""
    sends = {"register", "claim_work", "get_unit", "iter_events", "list_events", "aclose"}
    for name in sends:
        member = getattr(AsyncClient, name)
        assert inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member), name
    assert not inspect.iscoroutinefunction(Client.claim_work)


def test_return_values_are_typed() -> None:
    """No public method of either client returns Any or leaves its return unannotated."""
    for cls in (Client, AsyncClient, Work, AsyncWork):
        for name, text in surface(cls).items():
            if text != "property" and name != "__init__":
                assert "->" in text, f"{cls.__name__}.{name}"
                assert text.rpartition("->")[2].strip(" '") != "Any", f"{cls.__name__}.{name}"
