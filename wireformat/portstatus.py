"""A switch port's operational status as the switch publishes it, and as the controller reads it.

The model is OpenConfig's, as gNMI serves it: the leaf `/interfaces/interface[name=N]/state/oper-status` (UP,
DOWN, LOWER_LAYER_DOWN, ...), subscribed ON_CHANGE: first every port's current value, then a sync marker,
then one update per change. The embedded switch serves it beside P4Runtime on the same 127.0.0.1 port
and the controller subscribes (controller.portstatus), over gNMI (softswitch.p4runtime.gnmi) or over the
older JSON stream of this module (softswitch.p4runtime.portstatus); either way the controller is handed a
PortStatus.

Defined here, below both, so the switch and the controller share one definition of the message.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

# the gRPC method of the JSON transport (a server-streaming call; request and responses are JSON objects)
SERVICE = "p4ina.PortStatus"
SUBSCRIBE = f"/{SERVICE}/Subscribe"
# OpenConfig interfaces' oper-status values (openconfig-interfaces.yang); a port is up only when UP
OPER_STATUS = ("UP", "DOWN", "TESTING", "UNKNOWN", "DORMANT", "NOT_PRESENT", "LOWER_LAYER_DOWN")


class PortStatusError(ValueError):
    """A port-status message that does not follow this module's schema; the message names the field."""


def oper_status_path(interface: str) -> str:
    """The gNMI path of an interface's oper-status leaf."""
    return f"/interfaces/interface[name={interface}]/state/oper-status"


@dataclass(frozen=True)
class PortStatus:
    """One port's oper-status at one instant (a gNMI notification's update, or its sync marker)."""

    device_id: int
    port: int  # the P4 port number (P4Runtime's), the key the controller's topology uses
    interface: str  # the switch's interface name (the gNMI path's key)
    oper_status: str  # one of OPER_STATUS
    timestamp_ns: int  # when the switch saw it (CLOCK_REALTIME, as gNMI's timestamps)
    sync: bool = False  # True on the marker after the initial values (gNMI's sync_response); port fields unused

    def __post_init__(self) -> None:
        for name, kind in (("device_id", int), ("port", int), ("timestamp_ns", int)):
            value = getattr(self, name)
            if not isinstance(value, kind) or isinstance(value, bool) or value < 0:
                raise PortStatusError(f"PortStatus.{name}: expected an integer >= 0, got {value!r}")
        if not isinstance(self.interface, str):
            raise PortStatusError(f"PortStatus.interface: expected a string, got {self.interface!r}")
        if self.oper_status not in OPER_STATUS:
            raise PortStatusError(f"PortStatus.oper_status: {self.oper_status!r} is not one of {OPER_STATUS}")
        if not isinstance(self.sync, bool):
            raise PortStatusError(f"PortStatus.sync: expected a bool, got {self.sync!r}")

    @property
    def up(self) -> bool:
        return self.oper_status == "UP"

    @property
    def path(self) -> str:
        return oper_status_path(self.interface)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> PortStatus:
        if not isinstance(d, dict):
            raise PortStatusError(f"PortStatus: expected a JSON object, got {type(d).__name__}")
        names = set(cls.__dataclass_fields__)
        missing = sorted(names - set(d) - {"sync"})
        unknown = sorted(set(d) - names)
        if missing or unknown:
            raise PortStatusError(f"PortStatus: missing {missing or 'nothing'}, unknown {unknown or 'nothing'}")
        return cls(**d)

    def encode(self) -> bytes:
        return json.dumps(self.to_dict()).encode()

    @classmethod
    def decode(cls, data: bytes) -> PortStatus:
        try:
            return cls.from_dict(json.loads(data))
        except ValueError as ex:  # JSON errors and PortStatusError alike
            raise PortStatusError(f"port status message: {ex}") from ex
