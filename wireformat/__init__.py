"""The p4ina aggregation header, defined once in ``agg_header.toml``.

Everything that needs the wire format (P4 header types, the Scapy layer, the
README table, tests) reads it through :func:`load`, so they cannot drift apart.
"""

from wireformat.format import AGG, Field, WireFormat, WireFormatError, load

__all__ = ["AGG", "Field", "WireFormat", "WireFormatError", "load"]
