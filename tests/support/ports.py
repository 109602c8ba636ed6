"""Local TCP ports for the servers a test starts (uvicorn, PostgreSQL, Temporal), and for
addresses where nothing must listen.

Binding port 0 and closing the socket hands back a port that anything may take before
the test's server binds it: a server of another xdist worker, or the source port of any
outgoing connection, since both come from the kernel's ephemeral range (32768-60999 by
default). So ports are taken below that range instead, in a block of their own for each
xdist worker, handed out in turn (a port comes round again only after the other 1,499 of
the block), and each is checked free by binding it before it is handed out.

Other test runs on the machine (other engineers', other worktrees) have the same blocks:
each run starts its turn at a random place in its block, so two runs started together do
not walk the same ports in step. A port checked free may still be taken by another run
before our server binds it; `Served.wait_ready` tells that from a start of our own.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Iterator

FIRST = 20_000
BLOCK = 1_500  # ports per worker: 8 blocks end at 32,000, below the ephemeral range
BLOCKS = 8

_candidates: Iterator[int] | None = None


def worker_block(worker: str | None) -> range:
    """The ports of xdist worker `worker` ("gw0", "gw1", …; None when not under xdist)."""
    index = int(worker[2:]) if worker and worker.startswith("gw") else 0
    first = FIRST + BLOCK * (index % BLOCKS)
    return range(first, first + BLOCK)


def free_port() -> int:
    """A port of this worker's block that nothing on 127.0.0.1 holds now."""
    global _candidates
    if _candidates is None:  # xdist names the worker in the environment once it runs
        _candidates = _turn(worker_block(os.environ.get("PYTEST_XDIST_WORKER")))
    return _first_free(_candidates, BLOCK)


def _turn(ports: range) -> Iterator[int]:
    """`ports` in turn, from a random one on: this run's own place in the block."""
    start = random.randrange(len(ports))
    return itertools.cycle([*ports[start:], *ports[:start]])


# The HA suite's servers (a cluster is ten) take their ports between the workers' blocks and
# the ephemeral range, clear of the servers of any other test run on the machine: one run
# under -n 0 shares block 0 with every other such run, and a server of theirs that took
# our port would answer our /readyz. Each worker starts its turn at a random place in a share
# of its own, so two runs' workers of the same name do not walk it in step either.
HA_BLOCK = range(FIRST + BLOCK * BLOCKS, 32_700)
_ha_candidates: Iterator[int] | None = None


def free_ha_port() -> int:
    """A port of the HA suite's block that nothing on 127.0.0.1 holds now."""
    global _ha_candidates
    if _ha_candidates is None:
        share = len(HA_BLOCK) // BLOCKS
        start = worker_block(os.environ.get("PYTEST_XDIST_WORKER")).start
        offset = (start - FIRST) // BLOCK * share + random.randrange(share)  # not in step
        ports = [*HA_BLOCK[offset:], *HA_BLOCK[:offset]]
        _ha_candidates = itertools.cycle(ports)
    return _first_free(_ha_candidates, len(HA_BLOCK))


def _first_free(candidates: Iterator[int], count: int) -> int:
    for _ in range(count):
        port = next(candidates)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # held, or still in TIME_WAIT: the next one
            return port
    raise RuntimeError("every port of this block is held")
