"""Loopback rig for the host collectives (ring, hier, tree): ranks as threads, loss injected at the sender."""

from __future__ import annotations

import random
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hosts.collective import HostCollective
from hosts.coordination import LocalGroup
from hosts.workload import ring_bound


class LossySocket:
    """A UDP socket whose sendto drops a fraction of datagrams (seeded)."""

    def __init__(self, sock: socket.socket, loss: float, seed: int) -> None:
        self._sock, self._loss, self._rng = sock, loss, random.Random(seed)
        self.dropped = 0

    def sendto(self, data: bytes, addr: Any) -> int:
        if self._rng.random() < self._loss:
            self.dropped += 1
            return len(data)
        return self._sock.sendto(data, addr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def make_ranks(
    n: int, build: Callable[[int, tuple[tuple[str, int], ...], Any, Any], HostCollective], loss: float = 0.0
) -> list[HostCollective]:
    """n collectives on loopback sockets: build(rank, peers, group, sock) makes one."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    peers = tuple(s.getsockname() for s in socks)
    groups = LocalGroup.create(n, timeout_s=60)
    return [build(r, peers, groups[r], LossySocket(socks[r], loss, r) if loss else socks[r]) for r in range(n)]


def run(ranks: Sequence[HostCollective], inputs: Sequence[np.ndarray], calls: int = 1) -> list[np.ndarray]:
    """Every rank all-reduces its input `calls` times (a barrier per call), then they part at a barrier."""
    out: list[Any] = [None] * len(ranks)
    errors: list[BaseException] = []

    def body(r: int) -> None:
        try:
            for _ in range(calls):
                out[r] = ranks[r].allreduce(inputs[r])
            ranks[r].barrier("done")
        except BaseException as ex:  # noqa: BLE001 - handed to the test thread, which re-raises it
            errors.append(ex)
        finally:
            ranks[r].close()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(len(ranks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return out


def check(inputs: Sequence[np.ndarray], results: Sequence[np.ndarray], wire: str = "float32") -> None:
    """Bit-identical on every rank, and within the host methods' bound of the float64 sum."""
    ref = np.sum([x.astype(np.float64) for x in inputs], axis=0)
    mag = np.sum([np.abs(x.astype(np.float64)) for x in inputs], axis=0)
    bound = ring_bound(mag, len(inputs), wire)
    for res in results:
        assert res.dtype == np.float32 and res.shape == inputs[0].shape
        assert np.array_equal(res, results[0])  # bit-identical on every rank
        assert (np.abs(res - ref) <= bound).all()


def normal_inputs(n: int, size: int, seed: int = 0) -> list[np.ndarray]:
    return [np.random.default_rng([seed, r]).normal(0, r + 1.0, size).astype(np.float32) for r in range(n)]
