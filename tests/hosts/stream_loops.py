"""What tests/hosts/conftest.py's stream_loop fixture shares with the test modules that make transports of
their own: the socket-pair transports of a test, closed (and checked) when it ends."""

from __future__ import annotations

import pytest

from hosts.fakeswitch import SocketPairTransport

PAIRS = pytest.StashKey[list[SocketPairTransport]]()
