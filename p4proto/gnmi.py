"""The gNMI client library the controller uses: finsy's (`finsy.gnmiclient`, asyncio), over the bindings of
this package. Re-exported here so that p4proto stays the one importer of finsy (pyproject's "one-bindings"
contract); the names are finsy's own."""

from __future__ import annotations

from finsy.gnmiclient import GNMIClient, GNMIClientError, GNMISubscription, GNMIUpdate
from finsy.gnmipath import GNMIPath

__all__ = ["GNMIClient", "GNMIClientError", "GNMIPath", "GNMISubscription", "GNMIUpdate"]
