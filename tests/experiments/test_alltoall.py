"""End to end in Mininet: both all-to-alls on 8 hosts under two leaves, every block checked by every rank, timed
and bounded as the all-reduces are (one clock, the busiest link's bytes, measured / T_wire)."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulation.shaping import LinkShape
from experiments.allreduce import report
from experiments.allreduce.run import run_experiment
from experiments.config import ConfigError, ExperimentConfig
from hosts.methods import METHODS
from hosts.reliable import DATA_HDR, FRAME_OVERHEAD, elements_per_packet

pytestmark = pytest.mark.mininet

A2A = ("a2a-direct", "a2a-hier")
# 2 leaves x 1 spine x 4 hosts: 8 hosts in two groups of four (a2a-hier: four rails of two)
SMALL = dict(topology="leaf-spine:2x1x4", host_counts=(8,))


def test_both_all_to_alls_deliver_every_block_and_are_bounded_by_their_busiest_link(
    tmp_path: Path, leak_check: None
) -> None:
    size = 8 * 2000  # elements per rank: blocks of 2000 (5.5 frames), so both streams end in a partial frame
    cfg = ExperimentConfig(
        **SMALL,
        sizes=(size,),
        methods=A2A,
        reps=2,
        warmup=1,
        shape=LinkShape(bw_mbps=20),
        results_root=tmp_path,
    )
    result = run_experiment(cfg, out_dir=tmp_path / "run")
    summary = report.summary_of(result)
    assert summary["ok"], (summary["problems"], [p["problems"] for p in summary["points"]])
    assert len(result.samples) == len(A2A) * cfg.iterations * 8
    assert not [s.error for s in result.samples if s.error]
    n, per, block = 8, elements_per_packet("float32"), size // 8
    head = FRAME_OVERHEAD + DATA_HDR.size

    def stream(elements: int) -> int:  # bytes of one stream on the wire: its values and its frames' headers
        return elements * 4 + -(-elements // per) * head

    # the busiest link is the leaf-spine trunk (four hosts' worth of traffic on one link): each way it carries
    # every block from one leaf's four ranks to the other's, 16 blocks; direct sends them as 16 streams,
    # hier as 4 streams of 4 blocks (phase 2, consolidated), the same values in fewer frames
    trunk = {"a2a-direct": 16 * stream(block), "a2a-hier": 4 * stream(4 * block)}
    for p in summary["points"]:
        assert p["ok"] and p["reps"] == 2 and p["max_abs_error"] == 0.0, p
        assert p["rel_l2_target"] == METHODS[p["method"]].rel_l2_target == 0.0
        # every rank reported its own block check (a wrong block is the rank's error, failing the point)
        checked = [s for s in result.samples if s.method == p["method"] and not s.warmup]
        assert len(checked) == 2 * n and all(s.checker and s.max_abs_error == 0.0 for s in checked)
        # the data frames, plus acknowledgements (a few percent at most) and nothing else; no repetition beat the wire
        assert trunk[p["method"]] <= p["wire_bytes"] <= 1.05 * trunk[p["method"]], p
        assert p["t_over_wire"] >= 1.0, p
    assert trunk["a2a-hier"] < trunk["a2a-direct"]


def test_a2a_hier_refuses_a_host_count_that_does_not_fill_its_groups(tmp_path: Path) -> None:
    cfg = ExperimentConfig(
        topology="leaf-spine:2x1x4", host_counts=(6,), sizes=(600,), methods=("a2a-hier",), results_root=tmp_path
    )
    with pytest.raises(ConfigError, match="6 hosts on leaf-spine:2x1x4: a2a-hier needs groups of one size"):
        run_experiment(cfg, out_dir=tmp_path / "run")
