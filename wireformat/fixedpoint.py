"""The integer rules of the switch's arithmetic, shared by the controller and the hosts.

A job sums n contributions of c-bit lanes in an int32 register and, when its
results are narrower (r < 32 bits), the root shifts the sum right by `shift`
before clamping it to r bits. Which (n, c, r, shift) can represent every sum is a
property of the wire format and the switch, not of either side, so both the
controller (`p4ina job install`) and the workers check a job with the same code:

    headroom H = min(31, r - 1 + shift)                 magnitude bits the shifted sum may use
    q_limit    = min(2^(c-1) - 1, (2^H - 1) // n)       largest |lane| a worker may contribute

so that n contributions never saturate the int32 sum and, after the shift, never
clamp into the r-bit result. The *default* shift spends exactly the bits the sum
needs: shift = max(0, min(31, c - 1 + ceil(log2 n)) - (r - 1)) (0 for int32
results). A configuration is refused when it leaves fewer significant bits than
that default would: contributions squeezed below their width (shift too small),
or results that cannot use their width (shift too large; e.g. int8 contributions
of 16 workers shifted by 24 leave no bit at all).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from wireformat.format import AGG

ELEM_BITS = {AGG.elem_types["ELEM_INT32"]: 32, AGG.elem_types["ELEM_INT16"]: 16, AGG.elem_types["ELEM_INT8"]: 8}
BITS_ELEM = {bits: code for code, bits in ELEM_BITS.items()}
# A lane type, named by its integer type: what the controller, the hosts and the simulator call a job's lanes
# (up_lanes: what hosts send, down_lanes: what comes back). The header's elem_type code is the switch's name.
LaneType = Literal["int32", "int16", "int8"]
LANE_TYPES: tuple[LaneType, ...] = ("int32", "int16", "int8")
LANE_BITS: dict[LaneType, int] = {"int32": 32, "int16": 16, "int8": 8}
SUM_BITS = 32  # the switches' registers
# Exponent units per octave, by contribution lane width: a block's scale is 2^(exponent / steps). Finer steps
# waste less of a narrow lane's range on rounding the scale down to a power of two; the 8-bit field still spans
# 2^-32..2^32 for int8 and 2^-64..2^64 for int16 (hosts.quantization). The switches only compare exponents.
EXPONENT_STEPS = {AGG.elem_types["ELEM_INT32"]: 1, AGG.elem_types["ELEM_INT16"]: 2, AGG.elem_types["ELEM_INT8"]: 4}


class FixedPointConfigError(ValueError):
    """A job whose workers, lane widths and shift cannot represent its sums; the message gives the numbers."""


def lane_bits(elem_type: int) -> int:
    try:
        return ELEM_BITS[elem_type]
    except KeyError as ex:
        raise FixedPointConfigError(f"unknown elem_type {elem_type}; known: {sorted(ELEM_BITS)}") from ex


def lane_type(name: object) -> LaneType:
    """name as a LaneType, or FixedPointConfigError naming the choices (an old "none" says it is int32 now)."""
    for lanes in LANE_TYPES:
        if name == lanes:
            return lanes
    hint = ' ("none" is int32 now)' if name == "none" else ""
    raise FixedPointConfigError(f"lane type {name!r}: choose one of {', '.join(LANE_TYPES)}{hint}")


def bits_of(name: str) -> int:
    """'int32' | 'int16' | 'int8' -> 32 | 16 | 8."""
    return LANE_BITS[lane_type(name)]


def lane_elem(name: str) -> int:
    """The header's elem_type code of a lane type ('int8' -> ELEM_INT8)."""
    return BITS_ELEM[bits_of(name)]


def elem_lanes(elem_type: int) -> LaneType:
    """The lane type of a header's elem_type code (ELEM_INT8 -> 'int8'); ELEM_NONE has none."""
    return lane_type(f"int{lane_bits(elem_type)}")


def _ceil_log2(n: int) -> int:
    return max(0, (n - 1).bit_length())


def default_shift(n_workers: int, contrib_bits: int, result_bits: int) -> int:
    """The shift that gives the sum of n_workers exactly the headroom it needs in a result_bits result."""
    if result_bits >= SUM_BITS:
        return 0
    return max(0, min(SUM_BITS - 1, contrib_bits - 1 + _ceil_log2(n_workers)) - (result_bits - 1))


def q_limit(n_workers: int, contrib_bits: int, result_bits: int, shift: int) -> int:
    """Largest |q| a worker may contribute so that no sum of n_workers saturates or clamps (0: none can)."""
    headroom = min(SUM_BITS - 1, result_bits - 1 + shift)
    return max(0, min((1 << (contrib_bits - 1)) - 1, ((1 << headroom) - 1) // n_workers))


@dataclass(frozen=True)
class FixedPointPlan:
    """A checked job configuration and what it keeps of the numbers."""

    n_workers: int
    contrib_bits: int
    result_bits: int
    shift: int
    q_limit: int

    @property
    def contrib_magnitude_bits(self) -> int:
        """Significant magnitude bits of the largest contribution."""
        return self.q_limit.bit_length()

    @property
    def result_magnitude_bits(self) -> int:
        """Significant magnitude bits of the largest possible (shifted) result."""
        return (self.n_workers * self.q_limit >> self.shift).bit_length()


def partial_bits(n_workers: int, contrib_bits: int, result_bits: int, shift: int) -> int:
    """Width of the partial sums an inner switch sends up: 16 when every sum of the job fits int16, else 32.

    Any partial sum is a sum of at most n contributions of |q| <= q_limit, so it is bounded by the job's
    headroom 2^H - 1 (H = min(31, r - 1 + shift)): int8 lanes both ways of up to 256 workers sum into int16.
    """
    headroom = min(SUM_BITS - 1, result_bits - 1 + shift)
    return 16 if headroom + 1 <= 16 and contrib_bits <= 16 else 32


def round_shift(value: int, shift: int) -> int:
    """Bound on |x| after the switches' rounding arithmetic shift (shift_even) for |x| <= value."""
    return (value + ((1 << shift) >> 1)) >> shift


def shift_even(x: Any, shift: int) -> Any:
    """The switches' right shift by `shift`: arithmetic, rounding to nearest, ties to even (int or numpy int64).

    (x + 2^(s-1) - 1 + bit s of x) >> s. Ties to even, not up: a tree narrows its partial sums at every
    level, and rounding halves up biases each level's sums by +1/4 of its unit on average; over a 16-host
    fat-tree's three levels that bias was most of the int8 lanes' error (relative L2 0.14 against 0.06
    with one rounding at the root). Ties to even are unbiased, as IEEE 754's default rounding is.
    """
    if shift == 0:
        return x
    return (x + ((1 << (shift - 1)) - 1) + ((x >> shift) & 1)) >> shift


# BMv2's simple_switch gives a packet len + 512 bytes of buffer (simple_switch.cpp), and aborts on an
# assertion when the deparser needs more: no packet may leave a switch more than this much longer.
MAX_GROWTH_BYTES = 512


def check_growth(n_workers: int, contrib_bits: int, result_bits: int, shift: int) -> None:
    """Refuse jobs whose results or partial sums would be more than MAX_GROWTH_BYTES longer than the
    contributions that trigger them (a switch widens them in place)."""
    lanes = AGG.num_lanes
    up = partial_bits(n_workers, contrib_bits, result_bits, shift)
    for what, bits in (("results", result_bits), ("partial sums", up)):
        growth = lanes * (bits - contrib_bits) // 8
        if growth > MAX_GROWTH_BYTES:
            raise FixedPointConfigError(
                f"int{contrib_bits} contributions with int{bits} {what} grow each packet by {growth} bytes, more than "
                f"the {MAX_GROWTH_BYTES} bytes BMv2 can add to a packet: "
                f"send int{max(contrib_bits, bits - 8 * MAX_GROWTH_BYTES // lanes)} or wider contributions, "
                "or narrower results"
            )


def check(n_workers: int, contrib_bits: int, result_bits: int, shift: int | None = None) -> FixedPointPlan:
    """The plan for a job, or FixedPointConfigError naming what cannot be represented."""
    if n_workers < 1:
        raise FixedPointConfigError(f"a job needs at least one worker, got {n_workers}")
    for what, bits in (("contribution", contrib_bits), ("result", result_bits)):
        if bits not in BITS_ELEM:
            raise FixedPointConfigError(f"{what} lanes of {bits} bits: the wire carries 32, 16 or 8")
    if result_bits >= SUM_BITS and shift:
        raise FixedPointConfigError(f"shift {shift} with int32 results: only narrowed results are shifted")
    best = default_shift(n_workers, contrib_bits, result_bits)
    shift = best if shift is None else shift
    if not 0 <= shift <= SUM_BITS - 1:
        raise FixedPointConfigError(f"shift {shift} outside 0..{SUM_BITS - 1}")
    plan = FixedPointPlan(
        n_workers, contrib_bits, result_bits, shift, q_limit(n_workers, contrib_bits, result_bits, shift)
    )
    ref = FixedPointPlan(
        n_workers, contrib_bits, result_bits, best, q_limit(n_workers, contrib_bits, result_bits, best)
    )
    where = f"{n_workers} workers with int{contrib_bits} contributions and int{result_bits} results, shift {shift}"
    if plan.q_limit < 1:
        raise FixedPointConfigError(
            f"{where}: even |q| = 1 from every worker could overflow the result; use shift {best}"
        )
    if plan.contrib_magnitude_bits < ref.contrib_magnitude_bits:
        raise FixedPointConfigError(
            f"{where}: contributions keep {plan.contrib_magnitude_bits} of their {contrib_bits - 1} magnitude bits "
            f"(|q| <= {plan.q_limit}) where shift {best} keeps {ref.contrib_magnitude_bits}; use shift {best}"
        )
    if plan.result_magnitude_bits < ref.result_magnitude_bits:
        raise FixedPointConfigError(
            f"{where}: the largest sum, {n_workers} x {plan.q_limit} >> {shift}, keeps {plan.result_magnitude_bits} of "
            f"the result's {result_bits - 1} magnitude bits where shift {best} keeps {ref.result_magnitude_bits}; "
            f"use shift {best}"
        )
    return plan
