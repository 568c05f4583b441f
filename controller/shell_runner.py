"""p4runtime-shell on one switch, run by `p4ina shell` in p4runtime-shell's own environment (.venv-shell).

p4runtime-shell 0.0.6 pins p4runtime 1.4.1 and protobuf < 3.21, which p4ina's own environment (protobuf 6, its
C back end) cannot hold; this file therefore runs as a script under that environment's Python, talks to the switch
over gRPC like any other client, and imports nothing of p4ina (`python -I` keeps p4ina's folders off its path).
Interactive: p4runtime-shell's own IPython shell. With a script: the script runs in the names that shell gives.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def fix_p4runtime_shell() -> None:
    """Make p4runtime-shell 0.0.6 survive a batch that fails only in part.

    Its P4RuntimeErrorIterator skips the OK details of a failed Write without advancing, so it
    loops forever on the first OK one (PI, and the embedded switch, report every update, OK ones
    included). Advancing past them is what the loop means to do.
    """
    from google.rpc import code_pb2
    from p4.v1 import p4runtime_pb2
    from p4runtime_sh import p4runtime as sh_p4runtime

    def __next__(self: Any) -> tuple[int, Any]:  # noqa: N807 - the iterator protocol
        while self.idx < len(self.errors):
            p4_error = p4runtime_pb2.Error()
            if not self.errors[self.idx].Unpack(p4_error):
                raise sh_p4runtime.P4RuntimeErrorFormatException("Cannot convert Any message to p4.Error")
            self.idx += 1
            if p4_error.canonical_code != code_pb2.OK:
                return self.idx - 1, p4_error
        raise StopIteration

    sh_p4runtime.P4RuntimeErrorIterator.__next__ = __next__


def shell_namespace(sh: Any) -> dict[str, Any]:
    """The names a script sees: the interactive shell's (p4runtime_sh.shell.main's user_ns) and the module's.

    The interactive shell builds its namespace inside main(); a script must see the same names
    (`table_entry[...]`, `counter_entry[...]`, `multicast_group_entry`, `packet_out`, ...), so they are
    rebuilt here from the same classes, after setup() has loaded the switch's P4Info.
    """
    ns: dict[str, Any] = {name: getattr(sh, name) for name in dir(sh) if not name.startswith("_")}
    ns["p4info"] = sh.context.p4info
    for obj_type in sh.P4Type:
        ns[obj_type.p4info_name] = sh.P4Objects(obj_type)
    entity = sh.P4RuntimeEntity
    for name, p4type, cls in (
        ("table_entry", sh.P4Type.table, sh.TableEntry),
        ("counter_entry", sh.P4Type.counter, sh.CounterEntry),
        ("direct_counter_entry", sh.P4Type.direct_counter, sh.DirectCounterEntry),
        ("meter_entry", sh.P4Type.meter, sh.MeterEntry),
        ("direct_meter_entry", sh.P4Type.direct_meter, sh.DirectMeterEntry),
        ("action_profile_member", sh.P4Type.action_profile, sh.ActionProfileMember),
        ("action_profile_group", sh.P4Type.action_profile, sh.ActionProfileGroup),
        ("digest_entry", sh.P4Type.digest, sh.DigestEntry),
    ):
        ns[name] = sh.P4RuntimeEntityBuilder(p4type, getattr(entity, name), cls)
    ns["multicast_group_entry"] = sh.MulticastGroupEntry
    ns["clone_session_entry"] = sh.CloneSessionEntry
    ns["packet_in"] = sh.PacketIn()
    ns["packet_out"] = sh.PacketOut
    ns["idle_timeout_notification"] = sh.IdleTimeoutNotification()
    ns["digest_list"] = sh.DigestList()
    return ns


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="p4ina shell", description=__doc__)
    ap.add_argument("--grpc-addr", required=True)
    ap.add_argument("--device-id", type=int, required=True)
    ap.add_argument("--election-id", type=int, required=True, help="as one integer (high << 64 | low)")
    ap.add_argument("--script", type=Path, help="run this Python script in the shell's names instead")
    args = ap.parse_args(argv)
    fix_p4runtime_shell()
    from p4runtime_sh import shell as sh

    election = (args.election_id >> 64, args.election_id & ((1 << 64) - 1))
    if args.script is None:
        sys.argv = [
            "p4runtime-sh",
            "--grpc-addr",
            args.grpc_addr,
            "--device-id",
            str(args.device_id),
            "--election-id",
            f"{election[0]},{election[1]}",
        ]
        sh.main()  # fetches the P4Info from the switch (GetForwardingPipelineConfig)
        return 0
    code = compile(args.script.read_text(), str(args.script), "exec")
    sh.setup(args.device_id, args.grpc_addr, election, verbose=False)
    try:
        exec(code, shell_namespace(sh))  # noqa: S102 - the user's own script, as the interactive shell would run it
    finally:
        sh.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
