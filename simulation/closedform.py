"""Validation against closed forms: on a non-blocking fabric the model must reduce to the textbook formulas.

Each check builds a scenario, runs the full model (fabric, routing, SimGrid's
rates, the composition in simulation/methods.py) and compares with a formula
written here from the preset's numbers only:

- ring (lock-step, one message per step): T = 2(N-1) (alpha + S/(N B)), alpha = the per-step software
  overhead plus the latency of a ring edge (their mean on a multi-tier fabric), B the NIC rate net of
  frame headers;
- double binary tree (unpipelined, N = 2^k ranks on one switch): a parent receives from two children at
  once, so every level but the root's moves S/2 at B/2, the root's at B, up and back down:
  T = 2 log2(N) alpha + (2 log2(N) - 1) S/B;
- in-network: one round trip of the tree plus the contributions at line rate, each of the W slots in use
  opening with an exponent round (F_e, header only):
  T = alpha + L_up + L_down + F_down/B + (W F_e + P F_up)/B (P packets of F_up bytes up, F_down down).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulation.engine import Engine
from simulation.model import Evaluation, Scenario
from simulation.params import EXPONENT_FRAME, NDR, Preset, agg_elements, agg_frame


@dataclass(frozen=True)
class Check:
    name: str
    model_s: float
    formula_s: float

    @property
    def rel_error(self) -> float:
        return (self.model_s - self.formula_s) / self.formula_s

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "model_s": self.model_s, "formula_s": self.formula_s, "rel_error": self.rel_error}


def _model(scenario: Scenario, preset: Preset, engine: Engine) -> float:
    ev = Evaluation(scenario, preset, engine)
    ev.build()
    ev.solve()
    return next(r.time_s for r in ev.rows() if r.job == 0)


def _edge_latency(p: Preset, switches: int) -> float:
    """A GPU-to-GPU path over `switches` switches: one more cable than switches, each switch traversed once."""
    return (switches + 1) * p.cable_latency + switches * p.switch_latency


def checks(preset: Preset = NDR, engine: Engine | None = None) -> list[Check]:
    engine = engine or Engine()
    # the formulas have no host costs and switches that add no latency of their own while aggregating
    p = preset.with_(host_byte_cost=0.0, host_packet_cost=0.0, switch_agg_latency=0.0, pipeline_chunk=1 << 40)
    b_eff = p.nic_bw * p.mtu_payload / (p.mtu_payload + p.frame_overhead)
    out = []
    # ring on one switch: every edge crosses one switch
    n, size = 32, 1 << 24
    alpha = p.step_overhead + _edge_latency(p, 1)
    t = _model(Scenario(topology="clos:radix=64", gpus=n, methods=("ring-1nic",), sizes=(size,)), p, engine)
    out.append(Check(f"ring, {n} GPUs on one switch, {size >> 20} MiB", t, 2 * (n - 1) * (alpha + size / (n * b_eff))))
    # ring on a 3-tier fat-tree (radix 8, 128 GPUs: 4 per leaf, 16 per pod): edges inside a leaf, a pod, across pods
    n = 128
    edges = [1] * (n - n // 4) + [3] * (n // 4 - n // 16) + [5] * (n // 16)
    alpha = p.step_overhead + sum(_edge_latency(p, s) for s in edges) / n
    t = _model(Scenario(topology="clos:radix=8", gpus=n, methods=("ring-1nic",), sizes=(size,)), p, engine)
    out.append(
        Check(f"ring, {n} GPUs on a 3-tier fat-tree, {size >> 20} MiB", t, 2 * (n - 1) * (alpha + size / (n * b_eff)))
    )
    # double binary tree, unpipelined, on one switch
    n = 32
    k = int(math.log2(n))
    alpha = p.step_overhead + _edge_latency(p, 1)
    t = _model(Scenario(topology="clos:radix=64", gpus=n, methods=("tree-1nic",), sizes=(size,)), p, engine)
    out.append(
        Check(
            f"double binary tree, {n} GPUs, {size >> 20} MiB",
            t,
            2 * k * alpha + (2 * k - 1) * 2 * p.wire_bytes(size / 2) / p.nic_bw,
        )
    )
    # in-network on a 3-tier fat-tree: up GPU-leaf-spine-core (3 switches entered), down core-spine-leaf-GPU (2)
    n, size = 64, 1 << 22
    packets = math.ceil(size / 4 / agg_elements())
    slots = p.exponent_slots(packets, p.inc_slots)  # every slot opens with one exponent round (header-only frames)
    f_up, f_dn = agg_frame("int32"), agg_frame("int32")
    up = 3 * (p.cable_latency + p.switch_latency)
    down = 3 * p.cable_latency + 2 * p.switch_latency
    t = _model(Scenario(topology="clos:radix=8", gpus=n, methods=("inc-int32",), sizes=(size,)), p, engine)
    out.append(
        Check(
            f"in-network, {n} GPUs on a 3-tier fat-tree, {size >> 20} MiB",
            t,
            p.step_overhead + up + down + f_dn / p.nic_bw + (slots * EXPONENT_FRAME + packets * f_up) / p.nic_bw,
        )
    )
    return out
