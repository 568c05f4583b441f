"""The runner's per-repetition figures from two snapshots (no network): the bound and where the cores went."""

from __future__ import annotations

import os

import pytest

from experiments import harness as rn


def _runner() -> rn.Runner:
    r = rn.Runner.__new__(rn.Runner)  # only what _figures reads
    r.ports = {"e1-eth1": ("e1", 1, "h1"), "e1-eth3": ("e1", 3, "a1")}
    r.rate_bps, r.credit_bytes = 8e6, 0
    return r


def test_figures_split_the_cores_between_agents_switches_and_kernel() -> None:
    cores = os.cpu_count() or 1
    before = rn.Snapshot(
        10.0,
        {"e1-eth1": (0, 0), "e1-eth3": (0, 0)},
        {"e1": 1.0, "a1": 2.0},
        {11: 5.0, 12: 7.0},
        (1000, 5000, 300, 100),
        15.0,
    )
    after = rn.Snapshot(
        12.0,
        {"e1-eth1": (1_000_000, 200), "e1-eth3": (50, 400_000)},
        {"e1": 1.5, "a1": 2.1},
        {11: 6.0, 12: 7.4},
        (1000 + 150 * cores, 5000 + 200 * cores, 300 + 40 * cores, 100),
        17.0,
    )
    f = _runner()._figures(before, after, {"h1"})
    assert f["wire_bytes"] == 1_000_000 and f["wire_link"] == "e1:1>h1"
    assert f["t_wire_s"] == pytest.approx(1.0)  # 1 MB at 8 Mbit/s
    assert f["agents_busy"] == pytest.approx(0.5) and f["agents_cores"] == pytest.approx(0.7)
    assert f["switch_busy"] == pytest.approx(0.25) and f["busiest_switch"] == "e1"
    assert f["switches_cores"] == pytest.approx(0.3)
    assert f["cores_busy"] == pytest.approx(0.75)
    assert f["kernel_cores"] == pytest.approx(0.2 * cores)  # 40 of 200 jiffies per core
    # 2 s of 0.75 of every core over a 1 s T_wire: line rate would take 1.5 x the cores (0.4 x of them kernel)
    assert f["line_rate_cores"] == pytest.approx(1.5 * cores)
    assert f["line_rate_kernel_cores"] == pytest.approx(0.4 * cores)
    assert "wire_frames" not in f  # no frame counters in these snapshots: nothing made up


def test_frames_on_the_wire_count_each_transmission_once_and_give_the_kernel_cost_per_frame() -> None:
    cores = os.cpu_count() or 1
    r = _runner()  # e1-eth1 faces host h1, e1-eth3 faces switch a1; a1-eth1 is that link's other end
    r.ports["a1-eth1"] = ("a1", 1, "e1")
    links = {"e1-eth1": (0, 0), "e1-eth3": (0, 0), "a1-eth1": (0, 0)}
    before = rn.Snapshot(
        0.0, links, {}, {}, (0, 0, 0, 0), 0.0, {"e1-eth1": (100, 100), "e1-eth3": (100, 100), "a1-eth1": (0, 0)}
    )
    after = rn.Snapshot(
        1.0,
        links,
        {},
        {},
        (100 * cores, 200 * cores, 50 * cores, 0),
        0.0,
        {"e1-eth1": (110, 120), "e1-eth3": (130, 140), "a1-eth1": (40, 30)},
    )
    f = r._figures(before, after, {"h1"})
    # switches sent 10 + 30 + 40; the host sent 20 (e1-eth1's receive); switch-to-switch receives are the
    # other end's sends, not counted again
    assert f["wire_frames"] == 100
    assert f["kernel_us_per_frame"] == pytest.approx(0.25 * cores * 1.0 / 100 * 1e6)


def test_machine_jiffies_reads_busy_total_kernel_and_interrupts() -> None:
    busy, total, kernel, interrupts = rn.machine_jiffies()
    assert 0 <= interrupts <= kernel <= busy <= total


def test_interrupts_are_counted_as_ours_and_the_rest_as_other_programs() -> None:
    """The kernel's interrupt work (our frames through veth pairs and qdiscs) is charged to no process; it was
    counted as other programs' work in the run notes (40-60% of the cores claimed on an otherwise idle machine)."""
    cores = os.cpu_count() or 1
    r = _runner()
    links = {"e1-eth1": (0, 0)}
    before = rn.Snapshot(0.0, links, {}, {}, (0, 0, 0, 0), 0.0)
    # 1 s: 60 of every core's 100 jiffies busy, 20 of them interrupts; our processes used 0.3 s per core
    after = rn.Snapshot(1.0, links, {}, {}, (60 * cores, 100 * cores, 30 * cores, 20 * cores), 0.3 * cores)
    f = r._figures(before, after, set())
    assert f["cores_busy"] == pytest.approx(0.6)
    assert f["ours_busy"] == pytest.approx(0.3 + 0.2)  # the other 0.1 of the cores: another program's
