"""All-reduce sizes on the command line: one rule for `p4ina emulate`, `faults`, `allreduce`, `host` and `simulate`.

A tensor is float32, so a size is either bytes or float32 elements (1 element = 4 bytes), and the
text says which:

- bytes: a number with `B`, `KiB`, `MiB` or `GiB` (binary multiples): `4096B`, `64KiB`, `4MiB`, `1GiB`;
- elements: a number with `elem` (also `elems`, `elements`), a binary prefix allowed before it, with or
  without a hyphen: `1024elem`, `16Ki-elem`, `1Mi-elem`, `1Mielem`;
- a bare number (`1024`) or a bare multiple (`16K`, `1M`) has no unit, and was bytes in `simulate` but
  elements in `emulate` before this rule: refused, naming both spellings. So are decimal-looking units
  (`4KB`, `1MB`: decimal or binary?).

`--elements` (emulate, simulate) is the one place where a bare count is read, as float32 elements, and
K, M and G there mean 2^10, 2^20, 2^30 (the emulation's old `--sizes 1K,16K,128K`). A size in bytes must
be whole float32 elements (a multiple of 4).
"""

from __future__ import annotations

import re

ELEMENT_BYTES = 4  # float32
BINARY = {"": 1, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30}
_SIZE = re.compile(r"^(\d+)\s*([a-z]*)(?:-?\s*(elem|elems|elements))?$")
_ELEM_WORDS = ("elem", "elems", "elements")


class SizeError(ValueError):
    """A size whose text does not say its unit, or says it ambiguously; the message gives the spelling."""


def _split(text: str) -> tuple[int, str, bool]:
    """'16Ki-elem' -> (16, 'ki', True); '4MiB' -> (4, 'mib', False); refuses what is not a number and a unit."""
    t = text.strip().lower()
    m = _SIZE.match(t)
    if m is None:
        raise SizeError(f"size {text!r} is not a number with a unit: write e.g. 64KiB, 4MiB (bytes) or 16Ki-elem")
    digits, unit, elem = m.groups()
    if not elem:  # '16Kielem', '1024elem': the unit took the word whole
        for word in _ELEM_WORDS:
            if unit.endswith(word) and unit[: -len(word)] in BINARY:
                unit, elem = unit[: -len(word)], word
                break
    return int(digits), unit, bool(elem)


def _no_unit(text: str, n: int, prefix: str) -> SizeError:
    p = {"": "", "k": "Ki", "m": "Mi", "g": "Gi"}[prefix]
    elem = f"{n}{p}-elem" if p else f"{n}elem"
    return SizeError(f"size {text!r} has no unit (bytes or float32 elements?): write {n}{p}B or {elem}")


def parse_bytes(text: str) -> int:
    """A size with its unit -> bytes: '64KiB' -> 65536, '1Mi-elem' -> 4194304; bare numbers refused."""
    n, unit, elem = _split(text)
    if elem:
        if unit not in BINARY:
            fix = f": write {n}{unit[0].upper()}i-elem" if unit in ("k", "m", "g") else ""
            raise SizeError(f"size {text!r}: element multiples are Ki, Mi, Gi (2^10, 2^20, 2^30){fix}")
        nbytes = n * BINARY[unit] * ELEMENT_BYTES
    elif unit in ("", "k", "m", "g"):
        raise _no_unit(text, n, unit)
    elif unit in ("kb", "mb", "gb"):
        p = unit[0].upper() + "i"
        raise SizeError(f"size {text!r}: {unit.upper()} is ambiguous (decimal or binary?): write {n}{p}B")
    elif unit == "b" or (unit.endswith("b") and unit[:-1] in BINARY):
        nbytes = n * BINARY[unit[:-1]]
    else:
        raise SizeError(f"size {text!r}: unknown unit {unit!r}; use B, KiB, MiB, GiB or elem (e.g. 16Ki-elem)")
    if nbytes < ELEMENT_BYTES or nbytes % ELEMENT_BYTES:
        raise SizeError(
            f"size {text!r} is {nbytes} bytes: a float32 tensor needs a positive multiple of {ELEMENT_BYTES} bytes"
        )
    return nbytes


def parse_elements(text: str) -> int:
    """A size -> float32 elements. For --elements: a bare count is elements there, K/M/G binary ('16K' -> 16384)."""
    n, unit, elem = _split(text)
    if not elem and unit in ("k", "m", "g"):
        unit = unit + "i"
    if not elem and unit in BINARY:
        count = n * BINARY[unit]
        if count < 1:
            raise SizeError(f"size {text!r}: a tensor needs at least one element")
        return count
    return parse_bytes(text) // ELEMENT_BYTES


def elements_of(text: str) -> int:
    """A size with its unit (bytes or elements) -> float32 elements, as the emulation counts them."""
    return parse_bytes(text) // ELEMENT_BYTES


def human_bytes(n: float) -> str:
    """65536 -> '64 KiB', 8 -> '8 B'."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            v = n / div
            return f"{v:g} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def human_elements(n: int) -> str:
    """1024 -> '1Ki', 131072 -> '128Ki', 1000 -> '1000' (float32 elements; Ki = 2^10, as the input accepts)."""
    for unit, div in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)
