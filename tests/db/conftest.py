"""The database tests' fixtures: units placed in any state, and photographs of the ledger."""

from support.placing import snapshot, units

__all__ = ["snapshot", "units"]
