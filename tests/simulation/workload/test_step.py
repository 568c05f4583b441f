"""The step's composition against closed forms, on a system layer whose costs are known numbers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulation.workload.hardware import get_gpu
from simulation.workload.layout import Layout
from simulation.workload.models import get_model
from simulation.workload.step import StepResult, prepare, simulate_step


class FixedCosts:
    """A CollectiveCosts whose every collective takes `per_byte` x bytes (elements x 4) plus `fixed` seconds."""

    def __init__(self, per_byte: float = 0.0, fixed: float = 0.0) -> None:
        self.per_byte, self.fixed = per_byte, fixed
        self.prepared: dict[str, list[tuple[int, ...]]] = {}

    def prepare(self, dim: str, groups: list[tuple[int, ...]], methods: tuple[str, ...]) -> None:
        self.prepared[dim] = groups

    def _t(self, nbytes: float) -> float:
        return self.fixed + self.per_byte * nbytes

    def allreduce(self, method: str, elements: float, dim: str) -> float:
        return self._t(elements * 4)

    def reduce_scatter(self, method: str, elements: float, dim: str) -> float:
        return self._t(elements * 4) / 2

    def all_gather(self, method: str, nbytes: float, dim: str) -> float:
        return self._t(nbytes) / 2

    def alltoall(self, method: str, nbytes: float, dim: str) -> float:
        return self._t(nbytes)

    def p2p(self, nbytes: float, dim: str) -> float:
        return self._t(nbytes)


H100 = get_gpu("h100")


def _step(model: str, layout: Layout, costs: FixedCosts) -> StepResult:
    m = get_model(model)
    prepare(costs, m, layout, (layout.dp_method,))
    return simulate_step(m, layout, H100, costs)


def test_free_network_leaves_compute_and_the_bubble() -> None:
    m = get_model("llama3-70b")
    for schedule, vpp, slots in (("1f1b", 1, 8 + 3), ("gpipe", 1, 8 + 3), ("interleaved", 4, 8 + 3 / 4)):
        lo = Layout(tp=8, pp=4, dp=2, schedule=schedule, vpp=vpp, global_batch=16, sharding="ddp")
        r = _step("llama3-70b", lo, FixedCosts())
        # 80 layers on 4 stages: the last one, with the output head, is the busiest
        per_token = (m.forward_flops(8192) - m.head_flops()) / m.layers * 20 + m.head_flops()
        t_mb = 3 * per_token * 8192 / 8 / H100.sustained(m.hidden)
        assert r.breakdown["compute"] == pytest.approx(8 * t_mb, rel=1e-9)
        assert r.breakdown["bubble"] == pytest.approx((slots - 8) * t_mb, rel=1e-9)
        assert r.step_s == pytest.approx(slots * t_mb + r.breakdown["optimizer"], rel=1e-9)
        assert r.mfu == pytest.approx(r.model_flops / (r.step_s * 64 * H100.peak_flops))


def test_every_part_adds_up_and_costs_move_only_their_parts() -> None:
    lo = Layout(tp=8, pp=4, dp=4, schedule="interleaved", vpp=2, global_batch=32, sharding="zero1")
    free = _step("llama3-70b", lo, FixedCosts())
    slow = _step("llama3-70b", lo, FixedCosts(per_byte=1e-10, fixed=1e-5))
    for r in (free, slow):
        assert sum(r.breakdown.values()) == pytest.approx(r.step_s)
    assert slow.breakdown["compute"] == free.breakdown["compute"]
    assert slow.breakdown["tp"] > 0 == free.breakdown["tp"]
    assert slow.breakdown["pp"] > 0 and slow.step_s > free.step_s and slow.mfu < free.mfu


def test_bucketed_reduction_hides_behind_the_backward_until_it_cannot() -> None:
    """DDP: buckets reduced as the last backward produces them; exposed = what runs past its end."""
    lo = Layout(tp=1, pp=1, dp=4, global_batch=4, sharding="ddp", bucket_bytes=25 << 20)
    m = get_model("llama3-8b")
    t_b = 2 * m.forward_flops(8192) * 8192 / H100.sustained(m.hidden)
    grads = m.params() * 4  # fp32 bytes a GPU
    # a network fast enough: only the last bucket (what is left over a whole number of buckets) shows
    rate = 0.5 * t_b / grads
    fast = _step("llama3-8b", lo, FixedCosts(per_byte=rate))
    assert fast.breakdown["dp-allreduce"] == pytest.approx((grads % (25 << 20)) * rate, rel=1e-6)
    # too slow to hide: the exposed time is the total minus the backward it overlaps (all but the first bucket)
    slow = _step("llama3-8b", lo, FixedCosts(per_byte=3 * t_b / grads))
    assert slow.breakdown["dp-allreduce"] == pytest.approx(3 * t_b - t_b, rel=0.01)
    # without overlap every bucket is exposed
    serial = _step("llama3-8b", replace(lo, dp_overlap=False), FixedCosts(per_byte=rate))
    assert serial.breakdown["dp-allreduce"] == pytest.approx(0.5 * t_b, rel=1e-6)


def test_moe_all_to_all_is_on_the_critical_path_unless_hidden() -> None:
    lo = Layout(tp=1, pp=2, dp=16, ep=8, global_batch=64, sharding="zero1")
    r = _step("deepseek-v3", lo, FixedCosts(per_byte=1e-11))
    hidden = _step("deepseek-v3", replace(lo, a2a_overlap=1.0), FixedCosts(per_byte=1e-11))
    assert r.breakdown["a2a"] > 0 and hidden.breakdown["a2a"] == 0
    m = get_model("deepseek-v3")
    layers = 31  # ceil(61 / 2) on the busiest stage
    per = 4096 * m.top_k * m.hidden * 2 * 1e-11
    assert r.breakdown["a2a"] == pytest.approx(4 * 4 * layers * m.moe_layers / m.layers * per, rel=1e-9)
