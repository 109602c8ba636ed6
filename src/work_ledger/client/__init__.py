"""The Python SDK of work-ledger: a typed client of its HTTP API, sync and async.

`AsyncClient` (`aio.py`, `aio_work.py`) is the source; `Client` (`sync.py`, `work.py`) is
generated from it by `scripts/unasync.py`, so both have the same methods.

It imports nothing from the server side (only `work_ledger.errors`), so it can ship alone.

    from work_ledger.client import Client

    with Client() as client, client.claim(domain="orders") as work:
        ...                        # a background thread heartbeats the lease meanwhile
        work.cost(123)
        work.verify("https://ci.example/run/42")

Errors are the server's own classes (`work_ledger.errors`), carrying `invariant`,
`unit_id`, `state` and `allowed`; `NothingToClaim` and `Unreachable` are client-side.
"""

from typing import TYPE_CHECKING, Any

from work_ledger.client._parse import to_json
from work_ledger.client._sending import AGENT_HEADER, DEFAULT_URL
from work_ledger.client.errors import NothingToClaim, Unreachable, error_from_response
from work_ledger.client.flow import Control, ControlEvent
from work_ledger.client.models import (
    Asked,
    Attempt,
    BulkChange,
    BulkResult,
    BulkSkip,
    Claim,
    Event,
    NewChild,
    NewUnit,
    Page,
    Question,
    Registered,
    Registration,
    Split,
    Step,
    Unit,
    UnitDetail,
    UnitRef,
    Waiting,
)
from work_ledger.client.money import Budget, CostRecord, ModelCost
from work_ledger.client.sync import Client
from work_ledger.client.work import Claiming, Work

if TYPE_CHECKING:  # for type checkers only: at run time `__getattr__` imports them on first use
    from work_ledger.client.aio import AsyncClient
    from work_ledger.client.aio_work import AsyncClaiming, AsyncWork

__all__ = [
    "AGENT_HEADER",
    "DEFAULT_URL",
    "Asked",
    "AsyncClaiming",
    "AsyncClient",
    "AsyncWork",
    "Attempt",
    "Budget",
    "BulkChange",
    "BulkResult",
    "BulkSkip",
    "Claim",
    "Claiming",
    "Client",
    "Control",
    "ControlEvent",
    "CostRecord",
    "Event",
    "ModelCost",
    "NewChild",
    "NewUnit",
    "NothingToClaim",
    "Page",
    "Question",
    "Registered",
    "Registration",
    "Split",
    "Step",
    "Unit",
    "UnitDetail",
    "UnitRef",
    "Unreachable",
    "Waiting",
    "Work",
    "error_from_response",
    "to_json",
]


def __getattr__(name: str) -> Any:
    # The async client is imported on first use: a sync caller (every CLI verb) never pays
    # for asyncio.
    if name == "AsyncClient":
        from work_ledger.client.aio import AsyncClient

        return AsyncClient
    if name in ("AsyncWork", "AsyncClaiming"):
        from work_ledger.client import aio_work

        return getattr(aio_work, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
