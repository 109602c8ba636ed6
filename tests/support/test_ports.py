"""The test servers' ports: one block per xdist worker, below the kernel's ephemeral range,
handed out in turn, never one that is held."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from support.ports import BLOCKS, HA_BLOCK, free_ha_port, free_port, worker_block


def test_each_worker_has_a_block_of_its_own_below_the_ephemeral_range() -> None:
    blocks = [worker_block(f"gw{i}") for i in range(BLOCKS)]
    ports = [port for block in blocks for port in block]
    assert len(ports) == len(set(ports))
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert max(ports) < ephemeral_start
    assert worker_block(None) == worker_block("gw0")


def test_ports_are_not_handed_out_twice_and_a_held_one_is_skipped() -> None:
    block = worker_block(os.environ.get("PYTEST_XDIST_WORKER"))
    first = free_port()
    following = first + 1 if first + 1 in block else block.start
    with socket.socket() as held:
        held.bind(("127.0.0.1", following))
        held.listen()
        ports = [free_port() for _ in range(20)]
    assert following not in ports
    assert len({first, *ports}) == 21
    assert all(port in block for port in ports)


def test_the_ha_block_lies_between_the_workers_blocks_and_the_ephemeral_range() -> None:
    workers = {port for i in range(BLOCKS) for port in worker_block(f"gw{i}")}
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert workers.isdisjoint(HA_BLOCK)
    assert max(HA_BLOCK) < ephemeral_start
    assert free_ha_port() in HA_BLOCK
