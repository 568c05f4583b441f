"""The embedded switch's gNMI service (softswitch.p4runtime.gnmi) over loopback, read with the bare gNMI stub:
a feed set by hand (no root), the values and sync of a Subscribe, each change after it, the JSON stream on the
same feed, and every request it does not serve refused with a status and a message saying what is."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from p4proto import gnmi_pb2, gnmi_pb2_grpc, gnmi_version
from softswitch.p4runtime.gnmi import GnmiService, leaf_value, parse_path
from softswitch.p4runtime.portstatus import JsonPortStatusService, PortStatusFeed
from softswitch.p4runtime.server import P4RuntimeServer
from wireformat.portstatus import SUBSCRIBE, PortStatus

WAIT_S = 10.0  # a bound on waiting, not a measurement
PORTS = {1: "s1-eth1", 2: "s1-eth2", 7: "s1-eth7"}
OPER = "/interfaces/interface[name={}]/state/oper-status"
ID = "/interfaces/interface[name={}]/state/id"


def gpath(text: str, origin: str = "") -> Any:
    """A gNMI path from `/a/b[k=v]/c` (no escaping: the test's paths need none)."""
    path = gnmi_pb2.Path(origin=origin)
    for part in text.strip("/").split("/"):
        name, _, keys = part.partition("[")
        elem = path.elem.add(name=name)
        for kv in filter(None, keys.rstrip("]").split("][")):
            k, _, v = kv.partition("=")
            elem.key[k] = v
    return path


def subscription(
    *paths: str,
    mode: Any = gnmi_pb2.ON_CHANGE,
    list_mode: Any = gnmi_pb2.SubscriptionList.STREAM,
    encoding: Any = gnmi_pb2.PROTO,
    origin: str = "",
) -> Any:
    subs = [gnmi_pb2.Subscription(path=gpath(p, origin), mode=mode) for p in paths]
    return gnmi_pb2.SubscribeRequest(
        subscribe=gnmi_pb2.SubscriptionList(subscription=subs, mode=list_mode, encoding=encoding)
    )


@pytest.fixture
def feed() -> Iterator[PortStatusFeed]:
    f = PortStatusFeed(3, PORTS, {1: "UP", 2: "DOWN", 7: "UP"})
    yield f
    f.stop()


@pytest.fixture
def switch(feed: PortStatusFeed) -> Iterator[tuple[P4RuntimeServer, Any]]:
    """A P4Runtime server with the gNMI and JSON services on one feed, and a gNMI stub to it."""
    server = P4RuntimeServer(
        {}, "127.0.0.1:0", extra_handlers=[GnmiService(feed).handler(), JsonPortStatusService(feed).handler()]
    )
    server.start()
    channel = grpc.insecure_channel(server.address)
    try:
        yield server, gnmi_pb2_grpc.gNMIStub(channel)
    finally:
        channel.close()
        server.stop(0)


class Stream:
    """A Subscribe call read on a thread into a queue (so a test can wait for a message with a bound)."""

    def __init__(self, stub: Any, request: Any) -> None:
        self.call = stub.Subscribe(iter([request]))
        self.got: queue.Queue[Any] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for msg in self.call:
                self.got.put(msg)
            self.got.put("end")
        except grpc.RpcError as ex:
            self.got.put(ex)

    def next(self) -> Any:
        msg = self.got.get(timeout=WAIT_S)
        if isinstance(msg, grpc.RpcError):
            raise msg
        return msg

    def until_sync(self) -> list[Any]:
        out = []
        while not (msg := self.next()).sync_response:
            out.append(msg)
        return out


def leaves(msg: Any) -> list[tuple[str, str, Any]]:
    """(interface, leaf, value) of each update of a SubscribeResponse or Notification."""
    n = msg.update if isinstance(msg, gnmi_pb2.SubscribeResponse) else msg
    out = []
    for u in n.update:
        kind = u.val.WhichOneof("value")
        value = getattr(u.val, kind)
        out.append((u.path.elem[1].key["name"], u.path.elem[-1].name, value))
    return out


def test_a_subscription_gets_every_value_the_sync_then_each_change(
    switch: tuple[P4RuntimeServer, Any], feed: PortStatusFeed
) -> None:
    _, stub = switch
    before = time.time_ns()
    stream = Stream(stub, subscription(OPER.format("*"), ID.format("*")))
    try:
        initial = stream.until_sync()
        assert [leaves(m) for m in initial] == [
            [("s1-eth1", "id", 1), ("s1-eth1", "oper-status", "UP")],
            [("s1-eth2", "id", 2), ("s1-eth2", "oper-status", "DOWN")],
            [("s1-eth7", "id", 7), ("s1-eth7", "oper-status", "UP")],
        ]
        assert all(0 < m.update.timestamp <= time.time_ns() for m in initial)
        feed.set(7, "LOWER_LAYER_DOWN")
        feed.set(7, "LOWER_LAYER_DOWN")  # no change: nothing sent
        feed.set(2, "UP")
        changed = [stream.next(), stream.next()]
        assert [leaves(m) for m in changed] == [
            [("s1-eth7", "oper-status", "LOWER_LAYER_DOWN")],
            [("s1-eth2", "oper-status", "UP")],
        ]
        assert before < changed[0].update.timestamp <= changed[1].update.timestamp <= time.time_ns()
        assert stream.got.empty()
    finally:
        stream.call.cancel()


def test_one_interface_and_json_encoding(switch: tuple[P4RuntimeServer, Any], feed: PortStatusFeed) -> None:
    """A name selects its interface only; JSON encoding carries the same value as JSON text; TARGET_DEFINED is
    served as ON_CHANGE."""
    _, stub = switch
    req = subscription(OPER.format("s1-eth2"), mode=gnmi_pb2.TARGET_DEFINED, encoding=gnmi_pb2.JSON)
    req.subscribe.prefix.target = "s1"
    stream = Stream(stub, req)
    try:
        (initial,) = stream.until_sync()
        assert leaves(initial) == [("s1-eth2", "oper-status", b'"DOWN"')]
        assert initial.update.prefix.target == "s1"  # echoed
        feed.set(1, "DOWN")  # another interface's change: not this subscription's
        feed.set(2, "UP")
        assert leaves(stream.next()) == [("s1-eth2", "oper-status", b'"UP"')]
        assert stream.got.empty()
    finally:
        stream.call.cancel()


def test_the_stream_ends_when_the_switch_stops(switch: tuple[P4RuntimeServer, Any], feed: PortStatusFeed) -> None:
    _, stub = switch
    stream = Stream(stub, subscription(OPER.format("*")))
    stream.until_sync()
    feed.stop()
    assert stream.got.get(timeout=WAIT_S) == "end"


def test_once_mode_sends_the_values_and_the_sync_then_ends(switch: tuple[P4RuntimeServer, Any]) -> None:
    _, stub = switch
    req = subscription(ID.format("s1-eth7"), list_mode=gnmi_pb2.SubscriptionList.ONCE)
    got = list(stub.Subscribe(iter([req]), timeout=WAIT_S))
    assert [leaves(m) for m in got[:-1]] == [[("s1-eth7", "id", 7)]] and got[-1].sync_response


def test_the_json_stream_reads_the_same_feed(switch: tuple[P4RuntimeServer, Any], feed: PortStatusFeed) -> None:
    """One feed, two services: a change reaches a gNMI and a JSON subscriber alike."""
    server, stub = switch
    gnmi = Stream(stub, subscription(OPER.format("*")))
    with grpc.insecure_channel(server.address) as channel:
        json_call = channel.unary_stream(SUBSCRIBE, request_serializer=lambda b: b, response_deserializer=lambda b: b)(
            b"{}", timeout=WAIT_S
        )
        try:
            gnmi.until_sync()
            first = [PortStatus.decode(next(json_call)) for _ in range(4)]
            assert [(s.port, s.oper_status) for s in first[:3]] == [(1, "UP"), (2, "DOWN"), (7, "UP")]
            assert first[3].sync
            feed.set(1, "DOWN")
            assert leaves(gnmi.next()) == [("s1-eth1", "oper-status", "DOWN")]
            changed = PortStatus.decode(next(json_call))
            assert (changed.port, changed.oper_status, changed.device_id) == (1, "DOWN", 3)
        finally:
            json_call.cancel()
            gnmi.call.cancel()


@pytest.mark.parametrize(
    ("request_", "code", "says"),
    [
        (subscription("/interfaces/interface[name=*]/state/counters"), "INVALID_ARGUMENT", "is not served"),
        (subscription("/system/state/hostname"), "INVALID_ARGUMENT", "/system/state/hostname is not served"),
        (subscription(OPER.format("*"), origin="rfc7951"), "INVALID_ARGUMENT", "origin 'rfc7951'"),
        (subscription(OPER.format("s1-eth9")), "NOT_FOUND", "its interfaces: s1-eth1, s1-eth2, s1-eth7"),
        (subscription(OPER.format("*"), mode=gnmi_pb2.SAMPLE), "UNIMPLEMENTED", "SAMPLE is not served"),
        (
            subscription(OPER.format("*"), list_mode=gnmi_pb2.SubscriptionList.POLL),
            "UNIMPLEMENTED",
            "POLL mode is not served",
        ),
        (subscription(OPER.format("*"), encoding=gnmi_pb2.ASCII), "UNIMPLEMENTED", "encoding ASCII"),
        (subscription(), "INVALID_ARGUMENT", "the subscription list is empty"),
        (gnmi_pb2.SubscribeRequest(poll=gnmi_pb2.Poll()), "INVALID_ARGUMENT", "must carry a `subscribe` list"),
    ],
)
def test_what_is_not_served_is_refused_with_what_is(
    switch: tuple[P4RuntimeServer, Any], request_: Any, code: str, says: str
) -> None:
    _, stub = switch
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Subscribe(iter([request_]), timeout=WAIT_S))
    assert err.value.code().name == code and says in (err.value.details() or ""), err.value


def test_origin_openconfig_is_served_and_a_wrong_origin_is_caught() -> None:
    """The path parser, alone: the openconfig origin selects the same leaf; a wrong origin or key does not pass."""
    names = list(PORTS.values())
    none = gnmi_pb2.Path()
    sel = parse_path(none, gpath(OPER.format("s1-eth1"), "openconfig"), names)
    assert (sel.interface, sel.leaf) == ("s1-eth1", "oper-status")
    sel = parse_path(gpath("/interfaces"), gpath("/interface/state/id"), names)  # no key: every interface
    assert (sel.interface, sel.leaf) == (None, "id")
    with pytest.raises(Exception, match="keyed by `name` only"):
        parse_path(none, gpath("/interfaces/interface[ifindex=3]/state/id"), names)
    with pytest.raises(Exception, match="origin"):
        parse_path(none, gpath(OPER.format("*"), "openconfig-interfaces"), names)


def test_get_and_capabilities(switch: tuple[P4RuntimeServer, Any]) -> None:
    _, stub = switch
    reply = stub.Get(gnmi_pb2.GetRequest(path=[gpath(OPER.format("*"))], encoding=gnmi_pb2.JSON_IETF), timeout=WAIT_S)
    assert [leaves(n) for n in reply.notification] == [
        [("s1-eth1", "oper-status", b'"UP"')],
        [("s1-eth2", "oper-status", b'"DOWN"')],
        [("s1-eth7", "oper-status", b'"UP"')],
    ]
    caps = stub.Capabilities(gnmi_pb2.CapabilityRequest(), timeout=WAIT_S)
    assert caps.gNMI_version == gnmi_version() and caps.gNMI_version.count(".") == 2
    assert set(caps.supported_encodings) == {gnmi_pb2.JSON, gnmi_pb2.JSON_IETF, gnmi_pb2.PROTO}
    assert {m.name for m in caps.supported_models} == {"openconfig-interfaces", "openconfig-p4rt"}
    with pytest.raises(grpc.RpcError) as err:
        stub.Get(gnmi_pb2.GetRequest(path=[gpath("/interfaces/interface/config/enabled")]), timeout=WAIT_S)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as err:
        stub.Set(gnmi_pb2.SetRequest(), timeout=WAIT_S)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED and "read-only" in (err.value.details() or "")


def test_the_json_values_are_json() -> None:
    """The JSON encodings' text parses back to the PROTO scalars (a check that would catch a repr or a str())."""
    st = PortStatus(3, 7, "s1-eth7", "LOWER_LAYER_DOWN", 1)
    assert json.loads(leaf_value(st, "oper-status", gnmi_pb2.JSON).json_val) == "LOWER_LAYER_DOWN"
    assert json.loads(leaf_value(st, "id", gnmi_pb2.JSON_IETF).json_ietf_val) == 7
    assert leaf_value(st, "id", gnmi_pb2.PROTO).uint_val == 7
