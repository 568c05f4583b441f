"""bfloat16 on the wire: the top 16 bits of a float32, rounded to nearest even (as NCCL and PyTorch do).

numpy has no bfloat16, so values travel as uint16 and are widened back by a shift.
Sums stay float32 on the host; only what crosses the network is bfloat16.
"""

from __future__ import annotations

import numpy as np


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), round to nearest, ties to even; finite inputs only."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return ((bits + rounding) >> np.uint32(16)).astype(np.uint16)


def from_bf16(h: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32, exactly."""
    return (np.asarray(h, dtype=np.uint32) << np.uint32(16)).view(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to the nearest bfloat16, as float32."""
    return from_bf16(to_bf16(x))
