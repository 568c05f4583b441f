"""The workload layer: one training step of a model under a layout, from FLOPs and the collectives it waits for.

It asks the system layer (a `CollectiveCosts`) only for the time of a collective of a parallel dimension, and
composes the step the way the frameworks schedule it:

- compute: the FLOPs of the busiest pipeline stage (its layers, the output head on the last stage) for one
  microbatch, over the GPU's sustained rate (hardware.GpuSpec.sustained); backward twice the forward;
  recomputation runs the forward again (full) or the attention core again (selective);
- tensor parallelism: two all-reduces of the layer's activations forward and two backward per layer (with
  sequence parallelism these are all-gathers and reduce-scatters of the same total), on NVLink, exposed
  unless the layout hides a share (`tp_overlap`);
- MoE: dispatch and combine all-to-alls forward and again backward per MoE layer, on the critical path
  unless the layout hides a share (`a2a_overlap`);
- pipeline: 1F1B/GPipe take (m + p - 1) microbatch slots, the interleaved schedule (m + (p - 1) / v), the
  bubble being the slots beyond m; the activation sends are overlapped in the steady state and exposed along
  the fill and the drain (2 (p v - 1) sends);
- data parallelism: the stage's gradients in buckets (`bucket_bytes`, DDP's 25 MiB by default), each
  all-reduced (DDP) or reduce-scattered (ZeRO/FSDP) as soon as the last microbatch's backward has produced
  it, one after the other on one stream; what is left when the backward ends is exposed.  Expert gradients
  go to the expert-data-parallel groups.  ZeRO-1/2 all-gather the updated parameters (overlapped with the
  next step's first forward by default); FSDP gathers every layer's parameters before its forward and its
  backward and reduce-scatters its gradients after, per microbatch, each hidden behind the layer's compute
  where it is shorter;
- the optimizer: Adam's pass over its state in HBM (ADAM_BYTES_PER_PARAM), sharded by ZeRO/FSDP.

MFU is the model's FLOPs (forward + backward, no recomputation) per second over the GPUs' peak.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from simulation.workload.costs import A2A_METHODS, CollectiveCosts
from simulation.workload.hardware import GpuSpec
from simulation.workload.layout import Layout
from simulation.workload.models import ModelSpec

# Adam with fp32 master weights: read gradient, master weight, m and v (4 x 4 bytes), write weight, m, v
# (3 x 4) and the bf16 copy (2): bytes of HBM traffic per parameter per step.
ADAM_BYTES_PER_PARAM = 30
ACTIVATION_BYTES = 2  # bf16 activations (TP collectives, pipeline sends, all-to-all)
PARAM_BYTES = 2  # bf16 parameters (ZeRO/FSDP all-gathers)


@dataclass
class StepResult:
    model: str
    gpus: int
    gpu: str
    layout: dict[str, Any]
    step_s: float
    breakdown: dict[str, float]  # seconds; they add up to step_s
    model_flops: float  # per step, all GPUs
    hardware_flops: float  # per step, all GPUs, recomputation included
    mfu: float
    tflops_per_gpu: float  # model FLOPs per second per GPU, in TFLOP/s (what MFU multiplies the peak by)
    hw_tflops_per_gpu: float  # hardware FLOPs per second per GPU (Narayanan et al.'s "achieved teraFLOP/s")
    tokens_per_s: float
    microbatches: int
    labels: dict[str, str] = field(default_factory=dict)  # topology, placement, ...

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def exposed_comm(self) -> float:
        return sum(v for k, v in self.breakdown.items() if k not in ("compute", "bubble", "optimizer"))


def dims_of(model: ModelSpec, layout: Layout) -> dict[str, list[tuple[int, ...]]]:
    """The parallel dimensions this step communicates in, with their groups."""
    out = {}
    if layout.tp > 1:
        out["tp"] = layout.groups("tp")
    if layout.dp > 1:
        out["dp"] = layout.groups("dp")
    if model.moe and layout.ep > 1:
        out["ep"] = layout.groups("ep")
    if model.moe and layout.dp // layout.ep > 1:
        out["edp"] = layout.groups("edp")
    if layout.pp > 1:
        out["pp"] = layout.groups("pp")
    return out


def prepare(costs: CollectiveCosts, model: ModelSpec, layout: Layout, dp_methods: tuple[str, ...]) -> None:
    """Register every dimension's groups with the system layer (one network solve each)."""
    layout.check(model)
    for dim, groups in dims_of(model, layout).items():
        if dim == "tp":
            methods: tuple[str, ...] = (layout.tp_method,)
        elif dim == "ep":  # every all-to-all: a study composes the step with each from one solve
            methods = tuple(dict.fromkeys((layout.a2a_method, *A2A_METHODS)))
        else:
            methods = tuple(dict.fromkeys((*dp_methods, layout.ag_method)))
        costs.prepare(dim, groups, methods)


def _bucket_exposure(costs: list[float], window: float, overlap: bool) -> float:
    """Buckets ready one by one over `window` (the last backward), reduced in order on one stream: the time
    the reductions run past the window's end."""
    if not costs:
        return 0.0
    if not overlap:
        return sum(costs)
    n = len(costs)
    finish = 0.0
    for i, c in enumerate(costs):
        finish = max(finish, window * (i + 1) / n) + c
    return max(0.0, finish - window)


def simulate_step(
    model: ModelSpec, layout: Layout, gpu: GpuSpec, costs: CollectiveCosts, labels: dict[str, str] | None = None
) -> StepResult:
    """One training step (the dimensions must have been prepared on `costs`, see `prepare`)."""
    layout.check(model)
    lo = layout
    seq = lo.seq_len or model.seq_len
    tokens = lo.microbatch * seq  # per microbatch, per data-parallel rank (its TP group shares them)
    m = lo.microbatches
    rate = gpu.sustained(model.hidden)
    layers = model.layers
    moe_share = model.moe_layers / layers
    layer_fwd = model.forward_flops(seq) - model.head_flops()  # all layers, per token
    per_layer = layer_fwd / layers
    # the busiest stage: ceil((L + 2 fewer) / p) layers in the middle, `fewer` less and the head on the last
    if lo.pp == 1:
        n_layers, head = float(layers), 1.0
    else:
        mid = math.ceil((layers + 2 * lo.pp_fewer_layers) / lo.pp)
        last = mid - lo.pp_fewer_layers
        head_layers = model.head_flops() / per_layer
        n_layers, head = (float(mid), 0.0) if mid >= last + head_layers else (float(last), 1.0)
    stage_fwd = n_layers * per_layer + head * model.head_flops()  # FLOPs per token
    t_f = stage_fwd * tokens / lo.tp / rate
    recompute_fwd = 0.0  # FLOPs per token run again
    if lo.recompute == "full":
        recompute_fwd = n_layers * per_layer
    elif lo.recompute == "selective":
        recompute_fwd = n_layers * model.attention_core_flops(seq)
    t_re = recompute_fwd * tokens / lo.tp / rate
    t_b = 2 * t_f + t_re
    # tensor parallelism: 2 all-reduces a layer forward, 2 backward, 2 more when the forward is recomputed
    t_tp = 0.0
    if lo.tp > 1:
        per_ar = costs.allreduce(lo.tp_method, tokens * model.hidden, "tp")
        count = 4 + (2 if lo.recompute == "full" else 0)
        t_tp = n_layers * count * per_ar * (1 - lo.tp_overlap)
    # MoE: dispatch + combine forward and backward per MoE layer
    t_a2a = 0.0
    if model.moe and lo.ep > 1:
        nbytes = tokens / lo.tp * model.top_k * model.hidden * ACTIVATION_BYTES
        count = 4 + (2 if lo.recompute == "full" else 0)
        t_a2a = n_layers * moe_share * count * costs.alltoall(lo.a2a_method, nbytes, "ep") * (1 - lo.a2a_overlap)
    t_mb = t_f + t_b + t_tp + t_a2a
    if lo.pp == 1:
        slots = float(m)
    elif lo.schedule == "interleaved":
        slots = m + (lo.pp - 1) / lo.vpp
    else:
        slots = float(m + lo.pp - 1)
    t_pipe = slots * t_mb
    t_pp = 0.0
    if lo.pp > 1:
        send = tokens * model.hidden * ACTIVATION_BYTES / lo.tp
        t_pp = 2 * (lo.pp * lo.vpp - 1) * costs.p2p(send, "pp")
    # gradients of the busiest stage, per GPU: the layers' (non-expert and expert) and the embedding/head's
    dense_l, _ = model.layer_params(False)
    moe_l, experts_all = model.layer_params(True)
    non_expert = n_layers * ((1 - moe_share) * dense_l + moe_share * moe_l) / lo.tp
    non_expert += (2.0 if lo.pp == 1 else head) * model.vocab * model.hidden / lo.tp  # embedding and/or head
    experts = n_layers * moe_share * experts_all / lo.ep / lo.tp if model.moe else 0.0
    breakdown: dict[str, float] = {}
    reduce_name = "dp-allreduce" if lo.sharding == "ddp" else "dp-reduce-scatter"
    window = t_b + (t_tp + t_a2a) / 2  # the last microbatch's backward on this stage
    edp = model.moe and lo.dp // lo.ep > 1
    opt_params = non_expert + experts
    if lo.sharding == "fsdp":
        # per layer, per microbatch: gather before forward and backward, reduce-scatter after backward
        exposed = 0.0
        if lo.dp > 1:
            layer_bytes = (non_expert / max(n_layers, 1)) * PARAM_BYTES
            ag = costs.all_gather(lo.ag_method, layer_bytes, "dp")
            rs = costs.reduce_scatter(lo.dp_method, non_expert / max(n_layers, 1), "dp")
            per_f, per_b = t_f / n_layers, t_b / n_layers
            exposed = m * n_layers * (max(0.0, ag - per_f) + max(0.0, ag + rs - per_b)) + ag + rs
        breakdown["fsdp"] = exposed
        opt_params /= lo.dp
    else:
        costs_list: list[float] = []
        op = costs.allreduce if lo.sharding == "ddp" else costs.reduce_scatter
        bucket = lo.bucket_bytes / 4  # elements of the fp32 gradient a bucket holds
        for dim, elems, present in (("dp", non_expert, lo.dp > 1), ("edp", experts, edp)):
            if not present or elems <= 0:
                continue
            full, rest = divmod(elems, bucket)
            per = op(lo.dp_method, bucket, dim) if full else 0.0
            costs_list += [per] * int(full)
            if rest:
                costs_list.append(op(lo.dp_method, rest, dim))
        breakdown[reduce_name] = _bucket_exposure(costs_list, window, lo.dp_overlap)
        if lo.sharding != "ddp":
            ag = 0.0
            if lo.dp > 1:
                ag += costs.all_gather(lo.ag_method, non_expert * PARAM_BYTES, "dp")
            if edp:
                ag += costs.all_gather(lo.ag_method, experts * PARAM_BYTES, "edp")
            hidden = t_f if lo.param_gather_overlap else 0.0
            breakdown["param-all-gather"] = max(0.0, ag - hidden)
            opt_params = non_expert / lo.dp + (experts / (lo.dp // lo.ep) if model.moe else 0.0)
    compute = m * (t_f + t_b)
    out = {
        "compute": compute,
        "tp": m * t_tp,
        "a2a": m * t_a2a,
        "bubble": t_pipe - m * t_mb,
        "pp": t_pp,
        **breakdown,
        "optimizer": opt_params * ADAM_BYTES_PER_PARAM / gpu.hbm_bw,
    }
    step = sum(out.values())
    n = lo.gpus
    tokens_step = lo.dp * m * tokens
    model_flops = 3 * model.forward_flops(seq) * tokens_step
    hw_per_token = 3 * model.forward_flops(seq)
    if lo.recompute == "full":
        hw_per_token += layer_fwd
    elif lo.recompute == "selective":
        hw_per_token += layers * model.attention_core_flops(seq)
    hardware_flops = hw_per_token * tokens_step
    return StepResult(
        model=model.name,
        gpus=n,
        gpu=gpu.name,
        layout=lo.to_dict(),
        step_s=step,
        breakdown=out,
        model_flops=model_flops,
        hardware_flops=hardware_flops,
        mfu=model_flops / (step * n * gpu.peak_flops),
        tflops_per_gpu=model_flops / (step * n) / 1e12,
        hw_tflops_per_gpu=hardware_flops / (step * n) / 1e12,
        tokens_per_s=tokens_step / step,
        microbatches=m,
        labels=dict(labels or {}),
    )
