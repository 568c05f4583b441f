"""The report layer on made-up measurements (no root, no network)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from emulation import report
from emulation.__main__ import build_parser, config_from_args, parse_size
from emulation.experiment import INC_INT32, RING, ConfigError, ExperimentConfig, speedups, theory_ratio
from emulation.topo import LinkShape, LinkShapeError
from tests.e2e.fake_results import fake_result, fake_results_folder


def test_speedup_is_ring_latency_over_in_network_latency(tmp_path: Path) -> None:
    result = fake_result(tmp_path / "r")
    sp = speedups(result.measurements)
    by = {(m.method, m.hosts, m.size): m for m in result.measurements}
    for (method, n, size), value in sp.items():
        assert value == pytest.approx(by[(RING, n, size)].median_s / by[(method, n, size)].median_s)
    assert (RING, 4, 1024) not in sp


def test_results_folder_has_every_file_and_reads_back(tmp_path: Path) -> None:
    folder = fake_results_folder(tmp_path / "r")
    for name in ("config.json", "results.json", "raw.csv", "summary.json", "table.txt", "latency.png", "speedup.png"):
        assert (folder / name).stat().st_size > 0, name
    summary = json.loads((folder / "summary.json").read_text())
    entry = summary["methods"][INC_INT32]["8"]["16384"]
    assert entry["median_latency_s"] > 0 and entry["speedup_over_ring"] > 1
    assert summary["methods"][RING]["4"]["1024"]["speedup_over_ring"] is None
    rows = list(csv.DictReader(open(folder / "raw.csv")))
    assert len(rows) == 2 * 2 * 3 * 4  # hosts x sizes x methods x (reps + warm-up)
    again = report.load_results(folder)
    assert [m.median_s for m in again.measurements] == [m.median_s for m in fake_result(tmp_path / "x").measurements]
    assert report.table(again) == (folder / "table.txt").read_text().rstrip("\n")


def test_table_shows_speedups_and_what_bounded_the_run(tmp_path: Path) -> None:
    text = report.table(fake_result(tmp_path / "r"))
    assert "speed-up int32" in text and "x" in text
    assert "link" in text


def test_theory_ratio_grows_towards_twice_the_ring_bytes() -> None:
    assert 1.0 < theory_ratio(4) < theory_ratio(16) < 2.0


def test_sizes_parse_with_suffixes_and_refuse_nonsense() -> None:
    assert [parse_size(s) for s in ("1K", "256k", "1M", "1000")] == [1024, 262144, 1 << 20, 1000]
    with pytest.raises(Exception, match="not a positive number"):
        parse_size("0K")


def test_cli_options_become_a_config() -> None:
    args = build_parser().parse_args(["--k", "2", "--hosts", "2", "--sizes", "1K,2K", "--bw", "5", "--delay", "1", "--switch", "embedded"])
    cfg = config_from_args(args)
    assert cfg.topology == "fat-tree:2" and cfg.sizes == (1024, 2048) and cfg.shape == LinkShape(5.0, 1.0, None)
    assert "fat-tree2_embedded_h2_bw5_d1ms" == cfg.label()


@pytest.mark.parametrize("bad", [dict(host_counts=(1,)), dict(sizes=()), dict(methods=("nccl",)), dict(reps=0), dict(slots=0)])
def test_bad_configs_are_refused_with_the_field_named(bad: dict) -> None:
    with pytest.raises(ConfigError):
        ExperimentConfig(**bad)


def test_bad_link_shapes_are_refused() -> None:
    with pytest.raises(LinkShapeError, match="bandwidth"):
        LinkShape(bw_mbps=-1)
    with pytest.raises(LinkShapeError, match="loss"):
        LinkShape(loss_pct=100)


def test_worker_commands_carry_epoch_and_timeout_floor() -> None:
    from controller.leafspine import leaf_spine
    from emulation.runner import timeouts, worker_command

    cfg = ExperimentConfig(topology="leaf-spine:2x1x2", shape=LinkShape(bw_mbps=1.0))
    model = leaf_spine(2, 1, 2)
    hosts = ("h1", "h2", "h3")
    tmo = timeouts(cfg)
    # a full 128-slot window of 314-byte frames queues 0.32 s on a 1 Mbit/s link: the timer must not fire before
    assert tmo["inc"] > 128 * 314 * 8 / 1e6 and tmo["ring"] > cfg.ring_window * 1514 * 8 / 1e6
    inc = worker_command(cfg, INC_INT32, 1, hosts, model, "unix:/tmp/x", 1024, "h2-eth0", 128, 0, tmo, first_epoch=9)
    assert inc[inc.index("--first-epoch") + 1] == "9" and inc[inc.index("--min-timeout") + 1] == f"{tmo['inc']:.3f}"
    ring = worker_command(cfg, RING, 2, hosts, model, "unix:/tmp/x", 1024, "h3-eth0", 0, 0, tmo)
    assert ring[ring.index("--peers") + 1] == ",".join(model.host(h).ip for h in hosts)
    assert ring[ring.index("--groups") + 1] == "l1,l1,l2"
