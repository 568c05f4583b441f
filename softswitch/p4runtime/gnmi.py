"""The embedded switch's gNMI service: its ports' oper-status, as a real switch publishes it.

OpenConfig's leaves, the ones a P4Runtime controller needs to tell a link down:
- `/interfaces/interface[name=N]/state/oper-status` (openconfig-interfaces: UP, DOWN, LOWER_LAYER_DOWN, ...);
- `/interfaces/interface[name=N]/state/id` (openconfig-p4rt: the port's P4Runtime number, which the
  controller's topology uses; the interface name alone does not say it).
`Subscribe` in STREAM mode, ON_CHANGE (TARGET_DEFINED is ON_CHANGE here): every selected leaf's current
value, `sync_response`, then one notification per change, stamped in ns. ONCE mode sends the values and the
sync and ends. `Get` answers the same leaves; `Capabilities` names the models, encodings and gNMI version.
Anything else is refused with a gRPC status and one message saying what is served, before anything is sent.

The values come from a softswitch.p4runtime.portstatus.PortStatusFeed: in a running switch the one
rtnetlink socket that also feeds the JSON stream, however many subscribe. The service is added to the
P4Runtime server (127.0.0.1, one port for both, as Stratum does) through its extra_handlers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc

from p4proto import gnmi_pb2, gnmi_version
from softswitch.p4runtime.portstatus import PortStatusFeed
from wireformat.portstatus import PortStatus

LOG = logging.getLogger(__name__)

SERVICE = "gnmi.gNMI"
ORIGINS = ("", "openconfig")  # OpenConfig's paths carry no origin or this one (gNMI specification 2.2.2.1)
LEAVES = ("id", "oper-status")  # under /interfaces/interface[name=N]/state; the port number first
ENCODINGS = (gnmi_pb2.JSON, gnmi_pb2.JSON_IETF, gnmi_pb2.PROTO)
MODELS = (("openconfig-interfaces", "OpenConfig working group"), ("openconfig-p4rt", "OpenConfig working group"))
SERVED = "/interfaces/interface[name=*]/state/oper-status and /interfaces/interface[name=*]/state/id"


class GnmiRequestError(Exception):
    """A request this service does not serve: the gRPC status to answer and what to ask instead."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def path_text(elems: Iterable[Any]) -> str:
    """A gNMI path's elements as the specification writes them (`/a/b[k=v]/c`), for messages."""
    out = ""
    for e in elems:
        out += "/" + e.name + "".join(f"[{k}={v}]" for k, v in sorted(e.key.items()))
    return out or "/"


@dataclass(frozen=True)
class Selection:
    """One leaf of one interface, or of all of them (interface None: the path's `name=*` or no key)."""

    interface: str | None
    leaf: str

    def matches(self, st: PortStatus) -> bool:
        return self.interface is None or self.interface == st.interface


def parse_path(prefix: Any, path: Any, interfaces: Sequence[str]) -> Selection:
    """The leaf a request's prefix and path select, or GnmiRequestError naming what is served instead."""
    if prefix.origin and path.origin:
        raise GnmiRequestError(grpc.StatusCode.INVALID_ARGUMENT, "origin is set in both the prefix and the path")
    origin = prefix.origin or path.origin
    if origin not in ORIGINS:
        raise GnmiRequestError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"origin {origin!r} is not served: this switch serves OpenConfig paths (origin '' or 'openconfig')",
        )
    if len(prefix.element) or len(path.element):  # gNMI 0.4's string paths
        raise GnmiRequestError(grpc.StatusCode.INVALID_ARGUMENT, "paths in `element` are not served: use `elem`")
    elems = [*prefix.elem, *path.elem]
    text = path_text(elems)
    names = [e.name for e in elems]
    keyed = [i for i, e in enumerate(elems) if e.key]
    if names[:3] != ["interfaces", "interface", "state"] or len(names) != 4 or names[3] not in LEAVES:
        raise GnmiRequestError(
            grpc.StatusCode.INVALID_ARGUMENT, f"path {text} is not served: this switch serves {SERVED}"
        )
    if keyed not in ([], [1]) or set(elems[1].key) - {"name"}:
        raise GnmiRequestError(
            grpc.StatusCode.INVALID_ARGUMENT, f"path {text}: an interface is keyed by `name` only ({SERVED})"
        )
    name = elems[1].key.get("name", "*")
    if name != "*" and name not in interfaces:
        raise GnmiRequestError(
            grpc.StatusCode.NOT_FOUND, f"no interface {name} on this switch (its interfaces: {', '.join(interfaces)})"
        )
    return Selection(None if name == "*" else name, names[3])


def leaf_path(interface: str, leaf: str) -> Any:
    return gnmi_pb2.Path(
        elem=[
            gnmi_pb2.PathElem(name="interfaces"),
            gnmi_pb2.PathElem(name="interface", key={"name": interface}),
            gnmi_pb2.PathElem(name="state"),
            gnmi_pb2.PathElem(name=leaf),
        ]
    )


def leaf_value(st: PortStatus, leaf: str, encoding: int) -> Any:
    """The leaf's value in the asked encoding: PROTO as the scalar (oper-status a string_val, as OpenConfig's
    enumerations are sent; id a uint_val), JSON and JSON_IETF as the same value in JSON text."""
    value: str | int = st.oper_status if leaf == "oper-status" else st.port
    if encoding == gnmi_pb2.PROTO:
        return gnmi_pb2.TypedValue(string_val=value) if isinstance(value, str) else gnmi_pb2.TypedValue(uint_val=value)
    text = json.dumps(value).encode()
    if encoding == gnmi_pb2.JSON_IETF:
        return gnmi_pb2.TypedValue(json_ietf_val=text)
    return gnmi_pb2.TypedValue(json_val=text)


def check_encoding(encoding: int) -> None:
    if encoding not in ENCODINGS:
        names = ", ".join(gnmi_pb2.Encoding.Name(e) for e in ENCODINGS)
        raise GnmiRequestError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"encoding {gnmi_pb2.Encoding.Name(encoding)} is not served: ask one of {names}",
        )


class GnmiService:
    """gNMI over a PortStatusFeed: Subscribe, Get and Capabilities of the ports' oper-status and P4 port id."""

    def __init__(self, feed: PortStatusFeed) -> None:
        self.feed = feed

    @property
    def interfaces(self) -> list[str]:
        return [self.feed.ports[p] for p in sorted(self.feed.ports)]

    def notification(self, st: PortStatus, leaves: Sequence[str], encoding: int, target: str) -> Any:
        """One interface's leaves at the instant the switch saw its status."""
        n = gnmi_pb2.Notification(timestamp=st.timestamp_ns)
        if target:  # the target the request named, echoed (gNMI specification 2.2.2.1)
            n.prefix.target = target
        n.update.extend(
            gnmi_pb2.Update(path=leaf_path(st.interface, leaf), val=leaf_value(st, leaf, encoding)) for leaf in leaves
        )
        return n

    def _subscription(self, req: Any) -> tuple[Any, list[Selection]]:
        """The subscription list of a Subscribe's first request and what it selects, or GnmiRequestError."""
        if req.WhichOneof("request") != "subscribe":
            raise GnmiRequestError(
                grpc.StatusCode.INVALID_ARGUMENT, "the first SubscribeRequest must carry a `subscribe` list"
            )
        sl = req.subscribe
        if sl.mode == gnmi_pb2.SubscriptionList.POLL:
            raise GnmiRequestError(
                grpc.StatusCode.UNIMPLEMENTED, "POLL mode is not served: subscribe in STREAM mode (ON_CHANGE) or ONCE"
            )
        check_encoding(sl.encoding)
        if not sl.subscription:
            raise GnmiRequestError(
                grpc.StatusCode.INVALID_ARGUMENT, f"the subscription list is empty: subscribe to {SERVED}"
            )
        selections = []
        for sub in sl.subscription:
            if sl.mode == gnmi_pb2.SubscriptionList.STREAM:
                if sub.mode not in (gnmi_pb2.ON_CHANGE, gnmi_pb2.TARGET_DEFINED):
                    raise GnmiRequestError(
                        grpc.StatusCode.UNIMPLEMENTED,
                        f"{gnmi_pb2.SubscriptionMode.Name(sub.mode)} is not served: the oper-status is published "
                        "ON_CHANGE (ask ON_CHANGE or TARGET_DEFINED)",
                    )
                if sub.heartbeat_interval:
                    raise GnmiRequestError(
                        grpc.StatusCode.UNIMPLEMENTED, "heartbeat_interval is not served: ask it 0 (ON_CHANGE only)"
                    )
            selections.append(parse_path(sl.prefix, sub.path, self.interfaces))
        return sl, selections

    def Subscribe(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:  # noqa: N802
        """STREAM (ON_CHANGE) or ONCE: the selected leaves' values, the sync marker, then (STREAM) each change."""
        req = next(requests, None)
        if req is None:
            return
        try:
            sl, selections = self._subscription(req)
        except GnmiRequestError as ex:
            LOG.info("gNMI Subscribe refused: %s", ex.message)
            _abort(context, ex)
        target = sl.prefix.target

        def leaves_of(st: PortStatus, changed: bool) -> list[str]:
            # a change is the oper-status's: the id never changes
            return [
                leaf
                for leaf in LEAVES
                if (leaf == "oper-status" or not changed) and any(s.leaf == leaf and s.matches(st) for s in selections)
            ]

        with self.feed.listen() as (current, q):
            if not context.add_callback(lambda: q.put(None)):  # the subscriber left: stop waiting at once
                return
            if not sl.updates_only:
                for st in current:
                    if leaves := leaves_of(st, changed=False):
                        yield gnmi_pb2.SubscribeResponse(update=self.notification(st, leaves, sl.encoding, target))
            yield gnmi_pb2.SubscribeResponse(sync_response=True)
            if sl.mode == gnmi_pb2.SubscriptionList.ONCE:
                return
            while (st_or_end := q.get()) is not None:
                if leaves := leaves_of(st_or_end, changed=True):
                    yield gnmi_pb2.SubscribeResponse(update=self.notification(st_or_end, leaves, sl.encoding, target))

    def Get(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        """The selected leaves' current values, one notification per interface and path."""
        try:
            if request.type == gnmi_pb2.GetRequest.CONFIG:
                raise GnmiRequestError(
                    grpc.StatusCode.INVALID_ARGUMENT, f"the leaves served are state, not config ({SERVED})"
                )
            check_encoding(request.encoding)
            if not request.path:
                raise GnmiRequestError(grpc.StatusCode.INVALID_ARGUMENT, f"the request names no path: ask {SERVED}")
            selections = [parse_path(request.prefix, p, self.interfaces) for p in request.path]
        except GnmiRequestError as ex:
            LOG.info("gNMI Get refused: %s", ex.message)
            _abort(context, ex)
        status = self.feed.status()
        reply = gnmi_pb2.GetResponse()
        for sel in selections:
            for port in sorted(status):
                st = status[port]
                if sel.matches(st):
                    reply.notification.append(
                        self.notification(st, [sel.leaf], request.encoding, request.prefix.target)
                    )
        return reply

    def Capabilities(self, _request: Any, _context: grpc.ServicerContext) -> Any:  # noqa: N802
        return gnmi_pb2.CapabilityResponse(
            supported_models=[gnmi_pb2.ModelData(name=n, organization=o) for n, o in MODELS],
            supported_encodings=list(ENCODINGS),
            gNMI_version=gnmi_version(),
        )

    def Set(self, _request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        _abort(context, GnmiRequestError(grpc.StatusCode.UNIMPLEMENTED, f"this switch's gNMI is read-only ({SERVED})"))

    def handler(self) -> grpc.GenericRpcHandler:
        """The gRPC handler to add to the P4Runtime server (the methods of gnmi.proto's service gNMI)."""
        unary = grpc.unary_unary_rpc_method_handler
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Capabilities": unary(
                    self.Capabilities,
                    gnmi_pb2.CapabilityRequest.FromString,
                    gnmi_pb2.CapabilityResponse.SerializeToString,
                ),
                "Get": unary(self.Get, gnmi_pb2.GetRequest.FromString, gnmi_pb2.GetResponse.SerializeToString),
                "Set": unary(self.Set, gnmi_pb2.SetRequest.FromString, gnmi_pb2.SetResponse.SerializeToString),
                "Subscribe": grpc.stream_stream_rpc_method_handler(
                    self.Subscribe,
                    gnmi_pb2.SubscribeRequest.FromString,
                    gnmi_pb2.SubscribeResponse.SerializeToString,
                ),
            },
        )


def _abort(context: grpc.ServicerContext, ex: GnmiRequestError) -> NoReturn:
    context.abort(ex.code, ex.message)
    raise AssertionError("unreachable: abort raises")  # for the type checker
