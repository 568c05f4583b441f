"""The controller's side of the switches' port status: one small interface, one transport behind it.

`PortStatusSource.subscribe(...)` streams one switch's port oper-status (wireformat.portstatus: every port's
value, a sync marker, then each change, ON_CHANGE as gNMI's `/interfaces/interface/state/oper-status`) to a
callback until cancelled. `JsonPortStatus` speaks the embedded switch's JSON transport on the P4Runtime
address. A gNMI client (a Subscribe of that leaf, mode STREAM/ON_CHANGE) is a second implementation of the
same protocol: controller.monitor takes any PortStatusSource and needs nothing else.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import grpc

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
    """The switch does not publish its port status (BMv2 without gNMI, an older embedded switch)."""


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
        sub = _JsonSubscription(switch, address, on_status, on_end)
        if not sub.synced.wait(synced_timeout_s) or sub.error is not None:
            sub.cancel()
            raise PortStatusUnavailable(
                f"switch {switch} at {address} publishes no port status ({sub.error or 'no answer'}): the embedded "
                "switch serves it; BMv2 needs a gNMI transport (controller.portstatus)"
            )
        return sub
