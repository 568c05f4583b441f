"""The in-network worker's two stream loops (Python, and C through hosts.native_stream) on the same tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hosts import native_stream
from hosts.fakeswitch import FakeSwitch, SocketPairTransport, fake_socket_transport
from hosts.inc_worker import IncWorker
from tests.hosts.stream_loops import PAIRS


@pytest.fixture(params=["python", "c"])
def stream_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Runs a test module's body on each loop: for "c", the module's FakeTransport becomes the socket-pair
    transport (which the C loop can use), and the test fails if no all-reduce actually ran in C."""
    if request.param == "python":
        yield "python"
        return
    if native_stream.library() is None:
        pytest.skip("the C stream loop is unavailable here (no C compiler, or P4INA_INC_STREAM=python)")
    made: list[SocketPairTransport] = []
    calls = [0]
    native = IncWorker._stream_native

    def counted(self: IncWorker, *args: object, **kwargs: object) -> object:
        calls[0] += 1
        return native(self, *args, **kwargs)  # type: ignore[arg-type]

    def transport(switch: FakeSwitch, rank: int) -> SocketPairTransport:
        t = fake_socket_transport(switch, rank)
        made.append(t)
        return t

    monkeypatch.setattr(IncWorker, "_stream_native", counted)
    if hasattr(request.module, "FakeTransport"):
        monkeypatch.setattr(request.module, "FakeTransport", transport)
    request.node.stash[PAIRS] = made  # modules with transports of their own add theirs (test_inc_softswitch)
    try:
        yield "c"
    finally:
        for t in made:
            t.close()
    assert calls[0] > 0 or not any(t.sent for t in made), "frames went out, but not from the C loop"
