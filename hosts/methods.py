"""The all-reduce methods a host can run, and the accuracy each one promises.

One catalogue for the agent (which builds the worker), the emulation (which
installs jobs and computes bounds) and the reports. Each method states its
accuracy target as a relative L2 error against numpy's float64 sum of the
float32 inputs, ||result - exact|| / ||exact||, and why that number: a point
that misses it fails, whatever its speed.

- float32 methods (in-network int32, the float32 ring, hier, tree): 1e-6. float32 itself
  rounds each element to 2^-24 relative (6e-8); a ring's n-1 roundings of
  partial sums and int32 fixed point with log2(n) bits of headroom stay below
  1e-6 for up to thousands of workers, so 1e-6 means "as good as float32".
  hier and tree add in float32 too, with at most n-1 roundings per element.
- 16-bit methods (in-network int16 lanes both ways, the bf16 ring): 2^-7 =
  7.8e-3. bfloat16 keeps 8 significant bits (relative rounding 2^-9 per value);
  a bf16 ring rounds every partial sum once per hop, so its error grows past
  2^-9 with the ring's length. A 16-bit method is acceptable when it is no
  worse than that: the precision NCCL users accept when they all-reduce bf16
  gradients. (int16 lanes usually do far better, see the results.)
- 8-bit methods (in-network int8 lanes both ways): 2^-3 = 0.125 (SNR >= 18 dB).
  Eight bits per value, with log2(n) of them spent on headroom for the sum,
  leave 3-4 significant bits for 16 workers: 8-bit gradient compression is
  only useful with error feedback or for training that tolerates coarse
  updates (QSGD, 1-bit Adam). The target says what the format delivers, not
  that it trains as well; the training experiment measures that.

The all-to-all methods (collective "alltoall", hosts.alltoall) move blocks and add
nothing: their target is 0, every block bit for bit as its source sent it, and
every rank checks every block it received.
"""

from __future__ import annotations

from dataclasses import dataclass

from wireformat.fixedpoint import LaneType

FLOAT32_TARGET = 1e-6
HALF_TARGET = 2.0**-7
BYTE_TARGET = 2.0**-3
EXACT = 0.0  # a data movement: every block as it was sent


@dataclass(frozen=True)
class Method:
    name: str
    # "inc" (through the switches), or host-based: "ring", "hier", "tree", "a2a-direct", "a2a-hier" (hosts.agent)
    family: str
    label: str
    rel_l2_target: float
    lanes: LaneType = "int32"  # inc: the job's lanes, the same both ways (its up_lanes and down_lanes)
    wire: str = "float32"  # host methods: element type on the wire (float32 | bfloat16)
    collective: str = "allreduce"  # what it computes: "allreduce", or "alltoall" (every rank a block to every rank)

    @property
    def in_network(self) -> bool:
        return self.family == "inc"

    @property
    def alltoall(self) -> bool:
        return self.collective == "alltoall"


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("inc-int32", "inc", "in-network, int32 lanes", FLOAT32_TARGET, lanes="int32"),
        Method("inc-int16", "inc", "in-network, int16 lanes both ways", HALF_TARGET, lanes="int16"),
        Method("inc-int8", "inc", "in-network, int8 lanes both ways", BYTE_TARGET, lanes="int8"),
        Method("ring", "ring", "ring, float32", FLOAT32_TARGET, wire="float32"),
        Method("ring-bf16", "ring", "ring, bfloat16 on the wire", HALF_TARGET, wire="bfloat16"),
        Method("hier", "hier", "hierarchical (edge reduce, leader ring), float32", FLOAT32_TARGET, wire="float32"),
        Method("tree", "tree", "double binary tree, float32", FLOAT32_TARGET, wire="float32"),
        Method("a2a-direct", "a2a-direct", "all-to-all, every pair", EXACT, collective="alltoall"),
        Method("a2a-hier", "a2a-hier", "all-to-all, group then rails", EXACT, collective="alltoall"),
    )
}


class UnknownMethodError(ValueError):
    pass


def method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError as ex:
        raise UnknownMethodError(f"unknown method {name!r}; choose from {', '.join(METHODS)}") from ex
