"""The controller's gNMI port-status client (controller.portstatus.GnmiPortStatus, finsy's GNMIClient) against the
embedded switch's gNMI service over loopback, on a feed set by hand (no root): the initial values are in when
subscribe() returns, each change follows, cancel() is quiet, a switch that stops ends the stream with on_end,
and a switch that serves no port status (BMv2's gNMI) or serves a wrong value is refused with the reason; the
monitor says so once for all its switches."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc
import pytest

from controller.api import Controller
from controller.fattree import fat_tree
from controller.monitor import FailureMonitor
from controller.portstatus import GnmiPortStatus, PortStatusUnavailable, update_value
from emulation.localnet import embedded_switches
from p4proto import gnmi_pb2, gnmi_pb2_grpc
from p4proto.gnmi import GNMIPath, GNMIUpdate
from softswitch.p4runtime.gnmi import GnmiService, leaf_path
from softswitch.p4runtime.portstatus import PortStatusFeed
from softswitch.p4runtime.server import P4RuntimeServer
from wireformat.portstatus import PortStatus

WAIT_S = 10.0  # a bound on waiting, not a measurement


class Seen:
    """What the callbacks were given, with a condition to wait on."""

    def __init__(self) -> None:
        self.statuses: list[tuple[str, PortStatus]] = []
        self.ends: list[tuple[str, str]] = []
        self.cond = threading.Condition()

    def on_status(self, switch: str, st: PortStatus) -> None:
        with self.cond:
            self.statuses.append((switch, st))
            self.cond.notify_all()

    def on_end(self, switch: str, why: str) -> None:
        with self.cond:
            self.ends.append((switch, why))
            self.cond.notify_all()

    def wait(self, what: Any) -> None:
        with self.cond:
            assert self.cond.wait_for(what, WAIT_S), (self.statuses, self.ends)

    def ports(self) -> list[tuple[str, int, str, str]]:
        with self.cond:
            return [(sw, s.port, s.interface, s.oper_status) for sw, s in self.statuses]


@pytest.fixture
def feed() -> Iterator[PortStatusFeed]:
    f = PortStatusFeed(5, {1: "e1-eth1", 2: "e1-eth2"}, {1: "UP", 2: "DOWN"})
    yield f
    f.stop()


@pytest.fixture
def switch(feed: PortStatusFeed) -> Iterator[P4RuntimeServer]:
    server = P4RuntimeServer({}, "127.0.0.1:0", extra_handlers=[GnmiService(feed).handler()])
    server.start()
    yield server
    server.stop(0)


def test_subscribe_returns_with_the_initial_values_then_each_change_comes(
    switch: P4RuntimeServer, feed: PortStatusFeed
) -> None:
    seen = Seen()
    sub = GnmiPortStatus().subscribe("e1", switch.address, seen.on_status, seen.on_end)
    try:
        assert seen.ports() == [("e1", 1, "e1-eth1", "UP"), ("e1", 2, "e1-eth2", "DOWN")]  # before the return
        initial_ts = seen.statuses[0][1].timestamp_ns
        assert initial_ts == feed.status()[1].timestamp_ns  # the switch's own time of the value, in ns
        feed.set(2, "UP")
        feed.set(1, "LOWER_LAYER_DOWN")
        seen.wait(lambda: len(seen.statuses) == 4)
        assert seen.ports()[2:] == [("e1", 2, "e1-eth2", "UP"), ("e1", 1, "e1-eth1", "LOWER_LAYER_DOWN")]
        assert not seen.statuses[3][1].up and seen.statuses[2][1].up
        assert seen.statuses[3][1].timestamp_ns == feed.status()[1].timestamp_ns > initial_ts
    finally:
        sub.cancel()
    feed.set(2, "DOWN")
    feed.stop()
    threading.Event().wait(0.3)  # nothing more may come: the subscription was cancelled
    assert len(seen.statuses) == 4 and seen.ends == []


def test_a_switch_that_stops_ends_the_stream_with_on_end(switch: P4RuntimeServer, feed: PortStatusFeed) -> None:
    seen = Seen()
    subs = [GnmiPortStatus().subscribe(f"e{i}", switch.address, seen.on_status, seen.on_end) for i in (1, 2)]
    try:
        feed.stop()  # the switch's feed ends its streams: each subscriber is told once
        seen.wait(lambda: len(seen.ends) == 2)
        assert sorted(sw for sw, _ in seen.ends) == ["e1", "e2"]
        assert all("ended" in why for _, why in seen.ends), seen.ends
    finally:
        for sub in subs:
            sub.cancel()
    assert len(seen.ends) == 2


def test_a_server_gone_ends_the_stream_with_its_status(switch: P4RuntimeServer) -> None:
    seen = Seen()
    sub = GnmiPortStatus().subscribe("e1", switch.address, seen.on_status, seen.on_end)
    try:
        switch.stop(0)  # as a switch process's end closes its connections
        seen.wait(lambda: len(seen.ends) == 1)
        ((sw, why),) = seen.ends
        assert sw == "e1" and why.split()[0] in ("UNAVAILABLE", "CANCELLED"), why
    finally:
        sub.cancel()


def test_a_switch_without_gnmi_is_refused_with_the_reason() -> None:
    """A P4Runtime server with no gNMI service (as BMv2's, whose gNMI answers UNIMPLEMENTED), twenty times: grpc's
    side of a stream rejected at once sometimes says "INTERNAL Internal error from Core" (one in ten here), and the
    reason given must still be the target's."""
    with P4RuntimeServer({}, "127.0.0.1:0") as bare:
        for _ in range(20):
            with pytest.raises(PortStatusUnavailable, match=r"UNIMPLEMENTED.*BMv2"):
                GnmiPortStatus().subscribe("e1", bare.address, Seen().on_status)


def test_a_refusal_or_no_sync_is_refused_with_the_reason() -> None:
    """A target that refuses the subscription: its status and message reach the caller; one that never sends its
    sync marker: refused after the wait."""
    refusing = _Fake([], refuse="path /interfaces/interface[name=*]/state/id is not served")
    silent = _Fake([], sync=False)
    with _serve(refusing) as address:
        with pytest.raises(PortStatusUnavailable, match=r"INVALID_ARGUMENT path /interfaces/.*/state/id is not"):
            GnmiPortStatus().subscribe("x", address, Seen().on_status)
    with _serve(silent) as address:
        with pytest.raises(PortStatusUnavailable, match="no answer in 0.5 s"):
            GnmiPortStatus().subscribe("x", address, Seen().on_status, synced_timeout_s=0.5)


def test_nothing_listening_is_refused_after_the_wait() -> None:
    with P4RuntimeServer({}, "127.0.0.1:0") as gone:
        address = gone.address
    with pytest.raises(PortStatusUnavailable, match="no answer in 0.5 s"):
        GnmiPortStatus().subscribe("e1", address, Seen().on_status, synced_timeout_s=0.5)


class _Fake:
    """A gNMI server that sends what it is given, then the sync marker, then holds the stream open (or refuses)."""

    def __init__(self, responses: list[Any], sync: bool = True, refuse: str = "") -> None:
        self.responses, self.sync, self.refuse = responses, sync, refuse
        self.done = threading.Event()

    def Subscribe(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:  # noqa: N802
        next(requests)
        if self.refuse:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, self.refuse)
        yield from self.responses
        if self.sync:
            yield gnmi_pb2.SubscribeResponse(sync_response=True)
        self.done.wait(WAIT_S)

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            "gnmi.gNMI",
            {
                "Subscribe": grpc.stream_stream_rpc_method_handler(
                    self.Subscribe, gnmi_pb2.SubscribeRequest.FromString, gnmi_pb2.SubscribeResponse.SerializeToString
                )
            },
        )


@contextmanager
def _serve(fake: _Fake) -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers([fake.handler()])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        fake.done.set()
        server.stop(0)


def notification(interface: str, **leaves: Any) -> Any:
    n = gnmi_pb2.Notification(timestamp=42)
    for leaf, val in leaves.items():
        n.update.add(path=leaf_path(interface, leaf.replace("_", "-")), val=val)
    return gnmi_pb2.SubscribeResponse(update=n)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (gnmi_pb2.TypedValue(string_val="SIDEWAYS"), "'SIDEWAYS' is not one of"),
        (gnmi_pb2.TypedValue(uint_val=1), "expected a string, got 1"),
        (gnmi_pb2.TypedValue(json_val=b"{not json"), "json_val is not JSON"),
    ],
)
def test_a_wrong_value_is_refused_naming_it(value: Any, says: str) -> None:
    fake = _Fake([notification("x1", id=gnmi_pb2.TypedValue(uint_val=4), oper_status=value)])
    with _serve(fake) as address:
        with pytest.raises(PortStatusUnavailable, match=says):
            GnmiPortStatus().subscribe("x", address, Seen().on_status)


def test_a_status_before_its_port_id_waits_for_it_and_proto_values_are_read() -> None:
    """Another target may send the oper-status before the id, in PROTO encoding: the status is given once the
    port number is known, with the notification's timestamp."""
    fake = _Fake(
        [
            notification("x1", oper_status=gnmi_pb2.TypedValue(string_val="DORMANT")),
            notification("x1", id=gnmi_pb2.TypedValue(uint_val=9)),
        ]
    )
    seen = Seen()
    with _serve(fake) as address:
        GnmiPortStatus().subscribe("x", address, seen.on_status).cancel()
    assert [(sw, st.port, st.interface, st.oper_status, st.timestamp_ns) for sw, st in seen.statuses] == [
        ("x", 9, "x1", "DORMANT", 42)
    ]


def test_update_values_of_each_encoding() -> None:
    path = GNMIPath("/interfaces/interface[name=a]/state/oper-status")
    assert update_value(GNMIUpdate(1, path, gnmi_pb2.TypedValue(string_val="UP"))) == "UP"
    assert update_value(GNMIUpdate(1, path, gnmi_pb2.TypedValue(json_val=b'"UP"'))) == "UP"
    assert update_value(GNMIUpdate(1, path, gnmi_pb2.TypedValue(json_ietf_val=b"7"))) == 7
    with pytest.raises(ValueError, match="no value"):
        update_value(GNMIUpdate(1, path, None))


def test_the_monitor_says_once_that_no_switch_publishes_port_status(caplog: pytest.LogCaptureFixture) -> None:
    """Switches whose server has no gNMI port status (embedded switches without ports here; BMv2 alike): every
    one is listed in no_port_status with the reason, and one warning names them all."""
    with embedded_switches(fat_tree(2)) as (live, _), Controller(live, timeout=WAIT_S * 6) as ctl:
        mon = FailureMonitor(ctl.fabric, lambda _sig: None)
        with caplog.at_level(logging.WARNING, logger="controller.monitor"):
            mon.watch()
        mon.close()
    names = sorted(s.name for s in live.switches)
    assert sorted(mon.no_port_status) == names and len(names) == 5
    assert all("UNIMPLEMENTED" in why and "BMv2" in why for why in mon.no_port_status.values())
    (warning,) = [r for r in caplog.records if r.name == "controller.monitor"]
    assert all(n in warning.getMessage() for n in names), warning.getMessage()
