"""The Temporal side of the ledger (DESIGN §9), one module per purpose:

    lifecycle.py    the steps, Temporal's event type names, the exactly-once keys (pure)
    steps.py        one event's guarded steps on its unit (server side)
    ingest.py       the projection: batches of events, each applied once (server side)
    reconcile.py    units against workflow executions, read-only (server side)
    events.py       lifecycle events in the wire format (pure; plugin and follower)
    forwarder.py    POST /projection/events with retries and an Idempotency-Key (httpx)
    interceptor.py  the worker interceptor            } need the `temporal` extra;
    plugin.py       the worker plugin                 } never import the server side
    executions.py   reading executions from a Temporal server (`temporal` extra)
    checkpoint.py   the follower's checkpoint and held units, in the ledger database
    follower.py     `work-ledger temporal follow`: sweeps, describes, posts, checkpoints

Imports flow one way (import-linter): follower → executions → reconcile, checkpoint,
plugin → interceptor → forwarder, ingest → events, steps → lifecycle. This package's
__init__ imports nothing, so the ledger runs without temporalio.
"""
