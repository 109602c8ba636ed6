"""Optional Temporal integration: forward a workflow's lifecycle events to the ledger.

    events.py       the events and their exactly-once keys (pure; no Temporal, no HTTP)
    forwarder.py    POST /projection/events with retries and an Idempotency-Key (httpx)
    interceptor.py  the worker interceptor and plugin; needs `pip install work-ledger[temporal]`

Nothing here is imported by the rest of the package, so the ledger runs without temporalio.
"""
