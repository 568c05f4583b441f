"""The P4Runtime and gNMI bindings, in one place: every P4Runtime or gNMI message p4ina builds, sends, parses or
serves is made here.

The generated modules are finsy's (`finsy.proto`, generated for protobuf 6 and run on its C back end, upb;
docs/install.md says why these). The names are the specifications' own modules, so code reads
`p4runtime_pb2.WriteRequest` or `gnmi_pb2.SubscribeRequest` wherever it runs. Nothing else in p4ina imports
`finsy`, `p4.*` or `google.rpc`: a change of bindings is a change of this package (`p4proto.gnmi` holds the
gNMI client library, finsy's, for the controller).
"""

from __future__ import annotations

from finsy.proto import gnmi as gnmi_pb2
from finsy.proto import gnmi_grpc as gnmi_pb2_grpc
from finsy.proto import p4i as p4info_pb2
from finsy.proto import p4r as p4runtime_pb2
from finsy.proto import p4r_grpc as p4runtime_pb2_grpc
from finsy.proto import rpc_code as code_pb2
from finsy.proto import rpc_status as status_pb2
from google.protobuf.internal import api_implementation

__all__ = [
    "backend",
    "code_pb2",
    "gnmi_pb2",
    "gnmi_pb2_grpc",
    "gnmi_version",
    "p4info_pb2",
    "p4runtime_pb2",
    "p4runtime_pb2_grpc",
    "status_pb2",
]


def backend() -> str:
    """protobuf's implementation in this process: "upb" (C) is what p4ina runs on; "python" is its slow fallback."""
    return str(api_implementation.Type())


def gnmi_version() -> str:
    """The gNMI version of these bindings, as gnmi.proto states it (its `gnmi_service` file option)."""
    return str(gnmi_pb2.DESCRIPTOR.GetOptions().Extensions[gnmi_pb2.gnmi_service])
