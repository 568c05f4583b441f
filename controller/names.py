"""The P4 names and constants of docs/DESIGN.md, in one place for the controller.

When the P4 program renames something, this file (and only this file) changes.
"""

from __future__ import annotations

from wireformat import AGG

# -- constants (p4/include/types.p4) -------------------------------------------
MAX_JOBS = 16  # job indexes 1..MAX_JOBS-1 per switch; 0 is "no job"
NUM_SLOTS = 512  # aggregation slots per switch, shared by its jobs (p4/include/types.p4 says why)
NUM_DROP_REASONS = 16  # stride of the drops counter
MAX_FAN_IN = 32  # a child is a bit in the 32-bit slot bitmap
PORT_BITS = 9  # v1model port width
MAX_PORT = (1 << PORT_BITS) - 1

ROLE_ROOT = 1
ROLE_INNER = 2
ROLE_NAMES = {ROLE_ROOT: "root", ROLE_INNER: "inner"}

DROP_MALFORMED = 1
DROP_UNKNOWN_JOB = 2
DROP_BAD_PORT = 3
DROP_BAD_SLOT = 4
DROP_SCALE_MISMATCH = 5
DROP_BAD_CHECKSUM = 6
DROP_NO_ROUTE = 7
DROP_TTL_EXPIRED = 8
DROP_NOT_IPV4 = 9
DROP_STALE = 10
DROP_GROWTH = 11
DROP_CORRUPT = 12
DROP_REASONS: dict[int, str] = {
    DROP_MALFORMED: "malformed",
    DROP_UNKNOWN_JOB: "unknown_job",
    DROP_BAD_PORT: "bad_port",
    DROP_BAD_SLOT: "bad_slot",
    DROP_SCALE_MISMATCH: "scale_mismatch",
    DROP_BAD_CHECKSUM: "bad_checksum",
    DROP_NO_ROUTE: "no_route",
    DROP_TTL_EXPIRED: "ttl_expired",
    DROP_NOT_IPV4: "not_ipv4",
    DROP_STALE: "stale",
    DROP_GROWTH: "growth",
    DROP_CORRUPT: "corrupt",
}

ELEM_INT32 = AGG.elem_types["ELEM_INT32"]
ELEM_INT16 = AGG.elem_types["ELEM_INT16"]
ELEM_INT8 = AGG.elem_types["ELEM_INT8"]

# -- tables, actions, match fields ----------------------------------------------
T_JOB_CONFIG = "P4inaIngress.aggregation.job_config"
T_JOB_PORTS = "P4inaIngress.aggregation.job_ports"
T_IPV4_LPM = "P4inaIngress.forwarding.ipv4_lpm"
T_ECMP_MEMBERS = "P4inaIngress.forwarding.ecmp_members"
T_HOST_PORT = "P4inaEgress.host_port"

# Actions are named by their last component; the P4Info index resolves them
# among the table's own actions, so `forward` in two tables is not ambiguous.
A_SET_JOB = "set_job"
A_FROM_CHILD = "from_child"
A_FROM_PARENT = "from_parent"
A_FORWARD = "forward"
A_ECMP = "ecmp"
A_SET_HOST = "set_host"

K_JOB_ID = "job_id"
K_INGRESS_PORT = "ingress_port"
K_DST_ADDR = "dst_addr"
K_GROUP = "group"
K_INDEX = "index"
K_EGRESS_PORT = "egress_port"

#: Tables holding a job's entries, and tables holding the topology's (routes).
JOB_TABLES = (T_JOB_CONFIG, T_JOB_PORTS)
ROUTE_TABLES = (T_IPV4_LPM, T_ECMP_MEMBERS, T_HOST_PORT)

# -- counters ---------------------------------------------------------------------
C_CONTRIBUTIONS = "P4inaIngress.aggregation.contributions"
C_RETRANSMISSIONS = "P4inaIngress.aggregation.retransmissions"
C_COMPLETIONS = "P4inaIngress.aggregation.completions"
C_OVERFLOWS = "P4inaIngress.aggregation.overflows"
C_CORRUPT = "P4inaIngress.aggregation.corrupt"
C_DROPS = "P4inaIngress.drops"
C_RESULTS_SENT = "P4inaEgress.results_sent"
#: Counters indexed by job_index (short name -> P4 name).
JOB_COUNTERS = {
    "contributions": C_CONTRIBUTIONS,
    "retransmissions": C_RETRANSMISSIONS,
    "completions": C_COMPLETIONS,
    "overflows": C_OVERFLOWS,
    "corrupt": C_CORRUPT,
    "results_sent": C_RESULTS_SENT,
}


def drop_index(job_index: int, reason: int) -> int:
    """Index of (job, reason) in the drops counter."""
    return job_index * NUM_DROP_REASONS + reason


# -- registers (a slot's two shadow cells: cell = 2 * slot + v) -------------------------------
R_SLOT_STATE = "P4inaIngress.aggregation.slot_state"
R_SLOT_BITMAP = "P4inaIngress.aggregation.slot_bitmap"
R_SLOT_EPOCH = "P4inaIngress.aggregation.slot_epoch"
R_SLOT_TOKEN = "P4inaIngress.aggregation.slot_token"
CELLS_PER_SLOT = 2  # a slot's two shadow cells (docs/DESIGN.md)
STATE_AGGREGATING = 0  # the low two bits of slot_state: the cell's phase
STATE_SENT_UP = 1
STATE_FINAL = 2
STATE_PHASE_MASK = 3
