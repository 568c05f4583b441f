"""Failures the switches announce, turned into notices the moment they are announced.

Two signals, both pushed by the switches, neither a timeout:
- a switch process that dies closes its TCP connections, so the P4Runtime stream the controller keeps to it
  (controller.client: every session is a stream, for arbitration) ends with an error at once; any stream that
  ends while the session is open is a dead switch (a stream the controller closes itself says nothing);
- a link whose carrier drops changes its ports' oper-status, which each end's switch publishes ON_CHANGE
  (over gNMI, controller.portstatus); a switch-to-switch port that is not UP is a link down, and UP again is
  it back.

`FailureMonitor` keeps a stream and a port-status subscription to every switch, and calls `on_signal` once per
new failure (from the reader threads: the callback must be quick or hand off). What failed so far is kept
(`failed_switches`, `down_links`) for the fail-over's decision.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from controller.fabric import Fabric
from controller.portstatus import GnmiPortStatus, PortStatusSource, PortStatusUnavailable, Subscription
from controller.topology import link_key
from wireformat.portstatus import PortStatus

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class FailureSignal:
    """One failure as a switch announced it."""

    kind: Literal["switch", "link"]
    what: str  # the switch's name, or the link's "a-b" (link_key order)
    at: float  # when the controller heard it (the monitor's clock)
    how: str  # the evidence: the stream's error, or the port and its new oper-status
    switch: str | None = None  # kind "switch"
    link: tuple[str, str] | None = None  # kind "link"


class FailureMonitor:
    """Streams to every switch of `fabric` (or of `switches`) turned into FailureSignals.

    port_status: where the ports' oper-status comes from (default: the switches' gNMI, GnmiPortStatus; JsonPortStatus
    reads the embedded switch's JSON stream). now: the clock of FailureSignal.at (the experiments pass the clock
    their workers share)."""

    def __init__(
        self,
        fabric: Fabric,
        on_signal: Callable[[FailureSignal], None],
        port_status: PortStatusSource | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fabric = fabric
        self.on_signal = on_signal
        self.port_status = GnmiPortStatus() if port_status is None else port_status
        self.now = now
        self._lock = threading.Lock()
        self._failed: set[str] = set()
        self._down: dict[tuple[str, str], set[str]] = {}  # link -> the ends that report it not UP
        self._subs: dict[str, Subscription] = {}
        self.no_port_status: dict[str, str] = {}  # switch -> why it publishes none
        self.signals: list[FailureSignal] = []
        self._closed = False

    @property
    def failed_switches(self) -> set[str]:
        with self._lock:
            return set(self._failed)

    @property
    def down_links(self) -> set[tuple[str, str]]:
        with self._lock:
            return {ln for ln, ends in self._down.items() if ends}

    def watch(self, switches: Iterable[str] | None = None) -> None:
        """Hold a P4Runtime stream and a port-status subscription to each switch (all by default), from now on."""
        names = list(switches) if switches is not None else [s.name for s in self.fabric.topo.switches]
        self.fabric.connect(names)
        unavailable: list[str] = []
        for name in names:
            cl = self.fabric.client(name)
            cl.on_stream_lost = self._stream_lost
            addr = self.fabric.topo.switch(name).grpc_addr
            old = self._subs.pop(name, None)
            if old is not None:
                old.cancel()
            if addr is None:
                continue
            try:
                self._subs[name] = self.port_status.subscribe(name, addr, self._port)
            except PortStatusUnavailable as ex:
                self.no_port_status[name] = str(ex)
                unavailable.append(name)
        if unavailable:  # once, not per switch: with BMv2 it is every switch, for one reason
            LOG.warning(
                "%d switch(es) publish no port status (%s): link failures are not announced, switch deaths are; %s",
                len(unavailable),
                ", ".join(unavailable),
                self.no_port_status[unavailable[0]],
            )

    def revive(self, switches: Iterable[str] = (), links: Iterable[tuple[str, str]] = ()) -> None:
        """Forget failures that were repaired (a switch restarted: call watch() for it again; a link back up)."""
        with self._lock:
            self._failed -= set(switches)
            for ln in links:
                self._down.pop(link_key(*ln), None)

    def _signal(self, sig: FailureSignal) -> None:
        if self._closed:
            return
        self.signals.append(sig)
        LOG.warning("failure signalled: %s %s (%s)", sig.kind, sig.what, sig.how)
        try:
            self.on_signal(sig)
        except Exception:  # a reader thread of the gRPC channel: log, never raise into it
            LOG.exception("handling the failure of %s failed", sig.what)

    def _stream_lost(self, switch: str, why: str) -> None:
        at = self.now()
        with self._lock:
            if switch in self._failed:
                return
            self._failed.add(switch)
        self._signal(FailureSignal("switch", switch, at, f"P4Runtime stream ended: {why}", switch=switch))

    def _port(self, switch: str, st: PortStatus) -> None:
        at = self.now()
        peer = next((nb for nb in self.fabric.topo.neighbors(switch) if nb.port == st.port), None)
        if peer is None or peer.is_host:  # a host's port: not a link of any tree's fabric
            return
        link = link_key(switch, peer.peer)
        with self._lock:
            ends = self._down.setdefault(link, set())
            was_down = bool(ends)
            if st.up:
                ends.discard(switch)
                return
            ends.add(switch)
            if was_down or switch in self._failed or peer.peer in self._failed:
                return
        how = f"{switch} port {st.port} ({st.interface}) {st.oper_status}"
        self._signal(FailureSignal("link", "-".join(link), at, how, link=link))

    def close(self) -> None:
        """Stop the subscriptions; streams that end from now on signal nothing (the fabric closes its sessions)."""
        self._closed = True
        for sub in self._subs.values():
            sub.cancel()
        self._subs.clear()
