"""The controller's side of the switches' port status: one small interface, two transports behind it.

`PortStatusSource.subscribe(...)` streams one switch's port oper-status (wireformat.portstatus: every port's
value, a sync marker, then each change, ON_CHANGE as gNMI's `/interfaces/interface/state/oper-status`) to a
callback until cancelled. `GnmiPortStatus` is a gNMI client (Subscribe, STREAM mode, ON_CHANGE), what a real
switch answers and the embedded switch serves (softswitch.p4runtime.gnmi); `JsonPortStatus` reads the embedded
switch's older JSON stream. controller.monitor takes either and needs nothing else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from p4proto.gnmi import GNMIClient, GNMIClientError, GNMIPath, GNMIUpdate
from wireformat.portstatus import SUBSCRIBE, PortStatus, PortStatusError

LOG = logging.getLogger(__name__)


class Subscription(Protocol):
    def cancel(self) -> None: ...


class PortStatusSource(Protocol):
    def subscribe(
        self,
        switch: str,
        address: str,
        on_status: Callable[[str, PortStatus], None],
        on_end: Callable[[str, str], None] | None = None,
        synced_timeout_s: float = 5.0,
    ) -> Subscription:
        """Stream `switch`'s port status to on_status(switch, status); returns once the initial values (up to the
        sync marker) are in, or raises PortStatusUnavailable. on_end(switch, why) when the stream ends on its own."""
        ...


class PortStatusUnavailable(RuntimeError):
    """The switch does not publish its port status (BMv2, whose gNMI answers UNIMPLEMENTED; an older embedded
    switch)."""


def _raw(b: Any) -> Any:
    return b


class _JsonSubscription:
    def __init__(
        self,
        switch: str,
        address: str,
        on_status: Callable[[str, PortStatus], None],
        on_end: Callable[[str, str], None] | None,
    ) -> None:
        self.switch = switch
        self._channel = grpc.insecure_channel(address)
        stream = self._channel.unary_stream(SUBSCRIBE, request_serializer=_raw, response_deserializer=_raw)
        self._call = stream(b"{}")
        self._on_status, self._on_end = on_status, on_end
        self.synced = threading.Event()
        self.error: str | None = None
        self._cancelled = False
        self._thread = threading.Thread(target=self._read, name=f"port-status-{switch}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        why = "the switch ended the subscription"
        try:
            for data in self._call:
                st = PortStatus.decode(data)
                if st.sync:
                    self.synced.set()
                else:
                    self._on_status(self.switch, st)
        except grpc.RpcError as ex:
            why = f"{ex.code().name} {ex.details() or ''}".strip()
        except PortStatusError as ex:
            why = str(ex)
        self.error = why
        self.synced.set()  # wakes a subscribe() still waiting
        if not self._cancelled and self._on_end is not None:
            self._on_end(self.switch, why)

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()
        self._channel.close()
        self._thread.join(2)


def _synced(sub: _JsonSubscription | _GnmiSubscription, timeout_s: float, refusal: str) -> Subscription:
    """The subscription once its initial values are in; else it is cancelled and PortStatusUnavailable says why
    (`refusal` with {why}: the stream's error, or no answer)."""
    if not sub.synced.wait(timeout_s) or sub.error is not None:
        sub.cancel()
        raise PortStatusUnavailable(refusal.format(why=sub.error or f"no answer in {timeout_s:g} s"))
    return sub


class JsonPortStatus:
    """The embedded switch's port-status stream (softswitch.p4runtime.portstatus), on its P4Runtime address."""

    def subscribe(
        self,
        switch: str,
        address: str,
        on_status: Callable[[str, PortStatus], None],
        on_end: Callable[[str, str], None] | None = None,
        synced_timeout_s: float = 5.0,
    ) -> Subscription:
        return _synced(
            _JsonSubscription(switch, address, on_status, on_end),
            synced_timeout_s,
            f"switch {switch} at {address} publishes no port status over the JSON stream ({{why}}): only the "
            "embedded switch serves it; BMv2 serves none",
        )


# the leaves subscribed: the oper-status, and the P4Runtime port number of each interface (openconfig-p4rt's id),
# which names the port in the controller's topology
OPER_STATUS = GNMIPath("/interfaces/interface[name=*]/state/oper-status")
PORT_ID = GNMIPath("/interfaces/interface[name=*]/state/id")


def update_value(update: GNMIUpdate) -> Any:
    """A gNMI update's value: the scalar of a PROTO-encoded one, the parsed text of a JSON or JSON_IETF one."""
    tv = update.typed_value
    kind = tv.WhichOneof("value") if tv is not None else None
    if tv is None or kind is None:
        raise PortStatusError(f"gNMI update of {update.path} carries no value")
    if kind in ("json_val", "json_ietf_val"):
        try:
            return json.loads(getattr(tv, kind))
        except ValueError as ex:
            raise PortStatusError(f"gNMI update of {update.path}: {kind} is not JSON: {ex}") from ex
    return getattr(tv, kind)


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_THREAD: threading.Thread | None = None
_LOOP_LOCK = threading.Lock()


def _gnmi_loop() -> asyncio.AbstractEventLoop:
    """The one event loop every gNMI subscription of this process runs on, in a daemon thread of its own.

    One loop, not one a subscription: grpc's asyncio layer polls its completion queue for one loop, and loops
    closed while it still posts to them log "Event loop is closed" at exit. The loop lives as long as the process.
    """
    global _LOOP, _LOOP_THREAD
    with _LOOP_LOCK:
        if _LOOP is None or _LOOP_THREAD is None or not _LOOP_THREAD.is_alive():
            loop = asyncio.new_event_loop()
            _LOOP_THREAD = threading.Thread(target=loop.run_forever, name="gnmi-loop", daemon=True)
            _LOOP_THREAD.start()
            _LOOP = loop
        return _LOOP


class _GnmiSubscription:
    """One switch's gNMI subscription, a task of finsy's asyncio client on the process's gNMI loop (_gnmi_loop);
    callbacks run on that loop's thread, so they must be quick (as the monitor's are)."""

    def __init__(
        self,
        switch: str,
        address: str,
        on_status: Callable[[str, PortStatus], None],
        on_end: Callable[[str, str], None] | None,
    ) -> None:
        self.switch, self.address = switch, address
        self._on_status, self._on_end = on_status, on_end
        self.synced = threading.Event()
        self.error: str | None = None
        self._cancelled = False
        self._ports: dict[str, int] = {}  # interface -> P4 port (state/id)
        self._waiting: dict[str, tuple[str, int]] = {}  # interface -> (oper-status, ns) that came before its id
        self._loop = _gnmi_loop()
        self._future = asyncio.run_coroutine_threadsafe(self._read(), self._loop)

    def _take(self, update: GNMIUpdate) -> None:
        try:
            interface, leaf = update.path["interface", "name"], update.path[-1]
        except (KeyError, IndexError, ValueError) as ex:
            raise PortStatusError(f"gNMI update of an unexpected path {update.path}") from ex
        value = update_value(update)
        if leaf == "id":
            if not isinstance(value, int) or isinstance(value, bool):
                raise PortStatusError(f"gNMI {update.path}: expected an integer, got {value!r}")
            self._ports[interface] = value
            if interface in self._waiting:
                oper, ts = self._waiting.pop(interface)
                self._emit(interface, oper, ts)
        elif leaf == "oper-status":
            if not isinstance(value, str):
                raise PortStatusError(f"gNMI {update.path}: expected a string, got {value!r}")
            if interface in self._ports:
                self._emit(interface, value, update.timestamp)
            else:
                self._waiting[interface] = (value, update.timestamp)

    def _emit(self, interface: str, oper: str, timestamp_ns: int) -> None:
        # gNMI names interfaces, not P4Runtime devices: device_id 0 (the subscription is to one switch anyway)
        self._on_status(self.switch, PortStatus(0, self._ports[interface], interface, oper, timestamp_ns))

    async def _stream(self, client: Any) -> None:
        sub = client.subscribe()
        sub.on_change(OPER_STATUS, PORT_ID)
        # finsy's synchronize() ends at the sync marker (or at an end of the stream before it, which the next read
        # meets at once: on_end then follows subscribe()'s return)
        async for update in sub.synchronize():
            self._take(update)
        for interface in self._waiting:
            LOG.warning("%s: interface %s has no P4 port id (state/id); its status is ignored", self.switch, interface)
        self.synced.set()
        async for update in sub.updates():
            self._take(update)

    async def _read(self) -> None:
        why = "the switch ended the subscription"
        try:
            async with GNMIClient(self.address) as client:
                try:
                    await self._stream(client)
                except GNMIClientError as ex:
                    if ex.code.name != "INTERNAL" or self.synced.is_set():
                        raise
                    # A stream the target rejects at once (no gNMI service: BMv2) sometimes ends as "INTERNAL
                    # Internal error from Core" on grpc's side, the request's write racing the rejection; a unary
                    # Capabilities call then says what the target really answers
                    await client.capabilities()
                    raise
        except asyncio.CancelledError:
            if not self._cancelled:
                raise
            return
        except GNMIClientError as ex:
            why = f"{ex.code.name} {ex.message}".strip()
        except PortStatusError as ex:
            why = str(ex)
        except Exception as ex:  # a callback's fault: this switch's port status is no longer read; say so
            LOG.exception("%s: reading the port status failed", self.switch)
            why = f"the port-status reader failed: {ex!r}"
        self.error = why
        self.synced.set()  # wakes a subscribe() still waiting
        if not self._cancelled and self._on_end is not None:
            self._on_end(self.switch, why)

    def cancel(self) -> None:
        self._cancelled = True
        self._future.cancel()
        on_loop = threading.current_thread() is _LOOP_THREAD  # a callback may cancel its own subscription
        if not on_loop:
            try:
                self._future.result(2)
            except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
                pass


class GnmiPortStatus:
    """The switch's gNMI (Subscribe, STREAM, ON_CHANGE of the ports' oper-status and P4 port id) on its P4Runtime
    address, where the embedded switch serves it (softswitch.p4runtime.gnmi).

    The client library is finsy's GNMIClient (asyncio; through p4proto.gnmi), every subscription a task on the
    process's one gNMI event loop, in a thread of its own, so the callbacks come from a thread as JsonPortStatus's
    do."""

    def subscribe(
        self,
        switch: str,
        address: str,
        on_status: Callable[[str, PortStatus], None],
        on_end: Callable[[str, str], None] | None = None,
        synced_timeout_s: float = 5.0,
    ) -> Subscription:
        return _synced(
            _GnmiSubscription(switch, address, on_status, on_end),
            synced_timeout_s,
            f"switch {switch} at {address} publishes no port status over gNMI ({{why}}): the embedded switch serves "
            "it; BMv2's gNMI serves none (it answers UNIMPLEMENTED)",
        )
