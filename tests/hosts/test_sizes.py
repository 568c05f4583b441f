"""hosts.sizes: one rule for sizes on every command line (bytes or float32 elements, the unit written out)."""

from __future__ import annotations

import pytest

from hosts.sizes import SizeError, elements_of, human_bytes, human_elements, parse_bytes, parse_elements


@pytest.mark.parametrize(
    "text, nbytes",
    [
        ("4096B", 4096),
        ("64KiB", 64 << 10),
        ("4MiB", 4 << 20),
        ("1GiB", 1 << 30),
        ("16 kib", 16 << 10),  # case and a space do not matter
        ("1024elem", 4096),
        ("1024 elements", 4096),
        ("16Ki-elem", 16 << 12),
        ("1Mi-elem", 4 << 20),
        ("1Mielem", 4 << 20),
    ],
)
def test_a_size_with_its_unit_is_bytes_or_float32_elements(text: str, nbytes: int) -> None:
    assert parse_bytes(text) == nbytes
    assert elements_of(text) == nbytes // 4


@pytest.mark.parametrize(
    "text, fix",
    [
        ("16K", "write 16KiB or 16Ki-elem"),  # emulate read elements, simulate bytes: say which
        ("1M", "write 1MiB or 1Mi-elem"),
        ("1024", "write 1024B or 1024elem"),
        ("4KB", "write 4KiB"),  # decimal or binary?
        ("1MB", "write 1MiB"),
        ("1K-elem", "write 1Ki-elem"),
        ("6B", "multiple of 4 bytes"),  # not whole float32 elements
        ("0B", "multiple of 4 bytes"),
        ("1.5MiB", "not a number with a unit"),
        ("four KiB", "not a number with a unit"),
        ("4 furlongs", "unknown unit"),
    ],
)
def test_a_size_without_its_unit_or_with_an_ambiguous_one_is_refused_in_one_line(text: str, fix: str) -> None:
    with pytest.raises(SizeError) as err:
        parse_bytes(text)
    assert fix in str(err.value) and "\n" not in str(err.value) and repr(text) in str(err.value)


def test_elements_take_bare_counts_with_binary_multiples() -> None:
    """--elements: the emulation's old spelling (1K,16K,128K) means float32 elements there, and only there."""
    assert [parse_elements(t) for t in ("1024", "1K", "16K", "1M", "2Ki", "16Ki-elem", "64KiB")] == [
        1024,
        1024,
        16384,
        1 << 20,
        2048,
        16384,
        16384,
    ]
    with pytest.raises(SizeError, match="ambiguous"):
        parse_elements("4KB")


def test_sizes_print_as_they_are_read() -> None:
    assert [human_bytes(x) for x in (8, 64 << 10, 1 << 20, 3 << 29)] == ["8 B", "64 KiB", "1 MiB", "1.5 GiB"]
    assert [human_elements(x) for x in (1000, 1024, 131072, 1 << 20)] == ["1000", "1Ki", "128Ki", "1Mi"]
    assert parse_elements(human_elements(131072)) == 131072
