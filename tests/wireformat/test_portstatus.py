"""The port-status message the switch publishes and the controller reads: round trip, one golden string, and a
message off the schema refused by name."""

from __future__ import annotations

import pytest

from wireformat.portstatus import PortStatus, PortStatusError


def test_round_trip_and_golden_bytes() -> None:
    st = PortStatus(device_id=3, port=2, interface="p4ina0a-a1-2", oper_status="LOWER_LAYER_DOWN", timestamp_ns=7)
    data = st.encode()
    assert data == (
        b'{"device_id": 3, "port": 2, "interface": "p4ina0a-a1-2", "oper_status": "LOWER_LAYER_DOWN", '
        b'"timestamp_ns": 7, "sync": false}'
    )
    assert PortStatus.decode(data) == st and not st.up
    assert st.path == "/interfaces/interface[name=p4ina0a-a1-2]/state/oper-status"
    assert PortStatus(3, 2, "x", "UP", 1).up


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (b'{"device_id": 3, "port": 2, "interface": "x", "oper_status": "GONE", "timestamp_ns": 7}', "oper_status"),
        (b'{"device_id": 3, "port": -1, "interface": "x", "oper_status": "UP", "timestamp_ns": 7}', "port"),
        (b'{"device_id": 3, "interface": "x", "oper_status": "UP", "timestamp_ns": 7}', "port"),
        (b'{"device_id": 3, "port": 1, "interface": "x", "oper_status": "UP", "timestamp_ns": 7, "x": 1}', "x"),
        (b"[1, 2]", "JSON object"),
        (b"{not json", "port status message"),
    ],
)
def test_a_message_off_the_schema_is_refused_by_name(data: bytes, named: str) -> None:
    with pytest.raises(PortStatusError, match=named):
        PortStatus.decode(data)
