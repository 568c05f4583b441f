"""The hook's all-reduce of a bucket, rank by rank in threads over the model switch (no root, no DDP), and its
refusals; then the hook registered on a real DDP model (a one-rank Gloo group on loopback)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hosts import quantization as qz
from hosts.fakeswitch import FakeSwitch, FakeTransport
from hosts.inc_worker import IncJob, IncWorker
from hosts.methods import METHODS
from hosts.packets import Endpoint
from hosts.ring import RingAllreduce, RingConfig
from tests.hosts.test_agent import free_base_ports
from torchddp.hook import BROKEN_SCALE, HookError, HookState

N = 4
LANES = {"inc-int32": (qz.ELEM_INT32, 0), "inc-int16": (qz.ELEM_INT16, 2), "inc-int8": (qz.ELEM_INT8, 2)}


def inc_states(method: str, n: int = N, shift: int | None = None, **kw: Any) -> list[HookState]:
    lanes = METHODS[method].lanes
    elem, default_shift = LANES[method]
    shift = default_shift if shift is None else shift
    switch = FakeSwitch(job_id=5, n_workers=n, slot_count=8, result_type=elem, shift=shift)
    return [
        HookState(
            IncWorker(
                IncJob(5, r, n, 8, up_lanes=lanes, down_lanes=lanes, shift=shift, timeout_s=2.0, min_timeout_s=2.0),
                FakeTransport(switch, r),
                Endpoint(f"02:00:00:00:00:0{r}", f"10.0.0.{r + 1}"),
            ),
            method,
            r,
            n,
            **kw,
        )
        for r in range(n)
    ]


@pytest.fixture
def ring_states() -> Iterator[Callable[..., list[HookState]]]:
    made: list[HookState] = []

    def make(method: str = "ring", n: int = N, **kw: Any) -> list[HookState]:
        wire = METHODS[method].wire
        peers = tuple(("127.0.0.1", p) for p in free_base_ports(n))
        states = [
            HookState(RingAllreduce(RingConfig(rank=r, peers=peers, wire=wire)), method, r, n, **kw) for r in range(n)
        ]
        made.extend(states)
        return states

    yield make
    for s in made:
        s.worker.close()


def reduce_all(states: list[HookState], tensors: list[torch.Tensor], params: Any = None) -> list[torch.Tensor]:
    """Every rank's reduce() at once, each in its thread (as each rank's process would call it)."""
    out: list[Any] = [None] * len(states)
    errors: list[BaseException] = []

    def run(r: int) -> None:
        try:
            out[r] = states[r].reduce(tensors[r], params)
        except BaseException as ex:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(ex)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(states))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return out


def inputs(size: int, dtype: torch.dtype, seed: int, n: int = N) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, generator=g) * 10.0 ** float(r - 2)).to(dtype) for r in range(n)]


def exact_mean(tensors: list[torch.Tensor]) -> np.ndarray:
    return np.mean([t.to(torch.float64).numpy() for t in tensors], axis=0)


@pytest.mark.parametrize("method", list(LANES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_every_rank_gets_the_same_average_in_the_buckets_dtype(method: str, dtype: torch.dtype) -> None:
    states = inc_states(method)
    for call, size in enumerate([1, 257, 3 * 256, 1000]):  # the bucket's length changes from call to call
        xs = inputs(size, dtype, seed=call)
        outs = reduce_all(states, xs)
        assert all(o.dtype == dtype and o.shape == xs[0].shape for o in outs)
        first = outs[0].view(torch.uint8) if dtype != torch.float32 else outs[0].view(torch.int32)
        for o in outs[1:]:
            same = o.view(torch.uint8) if dtype != torch.float32 else o.view(torch.int32)
            assert torch.equal(first, same), "ranks got different bits"
        want = exact_mean(xs)
        got = outs[0].to(torch.float64).numpy()
        # the method's own target (relative L2 of the sum), plus the bucket dtype's rounding of the average
        target = METHODS[method].rel_l2_target + {torch.float32: 0, torch.bfloat16: 2**-8, torch.float16: 2**-11}[dtype]
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err <= target, f"{method} {dtype} size {size}: rel. L2 error {err:.2e} > {target:.2e}"


def test_host_ring_average_matches_and_broken_hooks_show(
    ring_states: Callable[..., list[HookState]],
) -> None:
    xs = inputs(700, torch.float32, seed=3)
    good = reduce_all(ring_states("ring"), xs)
    want = exact_mean(xs)
    assert np.allclose(good[0].numpy(), want, rtol=1e-5, atol=1e-6)
    bad = reduce_all(ring_states("ring", fault="scale"), xs)
    assert np.allclose(bad[0].numpy(), want * BROKEN_SCALE, rtol=1e-5, atol=1e-8)
    assert not np.allclose(bad[0].numpy(), want, rtol=1e-2)
    off = reduce_all(ring_states("ring", fault="offset"), xs)
    assert np.allclose(off[0].numpy(), np.roll(want, 1), rtol=1e-5, atol=1e-6)


def test_a_rank_that_keeps_its_own_gradient_differs_from_the_others(
    ring_states: Callable[..., list[HookState]],
) -> None:
    xs = inputs(300, torch.float32, seed=4)
    outs = reduce_all(ring_states("ring", fault="keep-local", fault_rank=2), xs)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[3])
    assert torch.equal(outs[2], xs[2]) and not torch.equal(outs[2], outs[0])


@pytest.mark.parametrize("method", ["inc-int8", "ring-bf16"])
def test_error_feedback_carries_the_rounding_into_the_next_step(
    method: str, ring_states: Callable[..., list[HookState]]
) -> None:
    """The same gradients step after step. Each rank's contribution carried on the wire at step t is its input
    plus the last residual minus the new one, so over T steps the contributions add up to T x minus the last
    residual: their mean is off by a T-th of one rounding, where without error feedback every step repeats the
    same rounding. The averaged results get closer to the exact average too, less so: the switches' rounding of
    the narrowed sum (and a bf16 ring's rounding of partial sums) is common to the ranks and not carried."""
    steps, size = 24, 512
    xs = inputs(size, torch.float32, seed=5)
    want = exact_mean(xs)
    errors = {}
    rounding = 0.0  # the contributions' error without error feedback (the first pass)
    for ef in (False, True):
        if method.startswith("inc"):
            states = inc_states(method, error_feedback=ef)
        else:
            states = ring_states(method, error_feedback=ef)
        layout = [(101, 200), (102, size - 200)]  # two parameters in the bucket: residuals are kept per parameter
        carried = [np.zeros(size) for _ in states]
        outs = []
        for _ in range(steps):
            before = [s._residual(layout) if ef else np.zeros(size, np.float32) for s in states]
            outs.append(reduce_all(states, xs, layout)[0].numpy().astype(np.float64))
            for r, s in enumerate(states):
                x_in = xs[r].numpy() + before[r]
                carried[r] += x_in - (s._residual(layout) if ef else x_in - s._carried(x_in))
        errors[ef] = np.linalg.norm(np.mean(outs, axis=0) - want) / np.linalg.norm(want)
        off = max(np.abs(c / steps - x.numpy()).max() for c, x in zip(carried, xs))
        if ef:
            assert set(states[0].residuals) == {101, 102} and states[0].residuals[101].shape == (200,)
            assert off <= rounding / (steps / 2), (off, rounding)
        else:
            rounding = off
            assert rounding > 0
    assert errors[True] < errors[False], errors


def test_error_feedback_residual_is_what_the_lanes_did_not_carry() -> None:
    states = inc_states("inc-int8", error_feedback=True)
    xs = inputs(256, torch.float32, seed=6)
    reduce_all(states, xs)
    for r, s in enumerate(states):
        plan = s.worker.last_plan
        x = xs[r].numpy()
        carried = qz.dequantize(qz.quantize(x, plan.exponent, plan.up_elem), plan.exponent, 0, plan.up_elem)
        (residual,) = s.residuals.values()
        assert np.array_equal(residual, (x - carried.astype(np.float32)).astype(np.float32))
        assert np.abs(residual).max() > 0  # int8 lanes round something off


# -- refusals at registration -----------------------------------------------------------------------------------
def test_what_cannot_be_served_is_refused_with_the_fix(ring_states: Callable[..., list[HookState]]) -> None:
    inc = inc_states("inc-int8")[0].worker
    ring = ring_states("ring", n=2)[0].worker
    with pytest.raises(HookError, match="unknown method 'inc-int4'"):
        HookState(inc, "inc-int4", 0, N)
    with pytest.raises(HookError, match="rounds nothing below float32"):
        HookState(ring, "ring", 0, 2, error_feedback=True)
    with pytest.raises(HookError, match="needs int16 lanes both ways; the worker's job has int8"):
        HookState(inc, "inc-int16", 0, N)
    with pytest.raises(HookError, match="is a host method"):
        HookState(inc, "ring", 0, N)
    with pytest.raises(HookError, match="is a host method"):
        HookState(ring, "ring-bf16", 0, 2)
    with pytest.raises(HookError, match="rank 0 of 2, the process group rank 0 of 4"):
        HookState(ring, "ring", 0, 4)
    with pytest.raises(HookError, match="runs through the switches"):
        HookState(ring, "inc-int32", 0, 2)
    with pytest.raises(HookError, match="unknown fault"):
        HookState(ring, "ring", 0, 2, fault="flip")
    with pytest.raises(HookError, match="a bucket of torch.float64"):
        ring_states("ring", n=1)[0].reduce(torch.zeros(3, dtype=torch.float64))


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_ddp_takes_the_hook_and_refuses_a_float64_model(
    one_rank_group: None, ring_states: Callable[..., list[HookState]]
) -> None:
    """DDP's own check of the hook's signature passes (no string annotation), a step goes through the hook, and a
    model that has float64 parameters is refused before any step."""
    from torch.nn.parallel import DistributedDataParallel

    from torchddp import register

    state = ring_states("ring", n=1)[0]
    model = torch.nn.Linear(5, 3)
    ddp = DistributedDataParallel(model)
    register(ddp, state)
    ddp(torch.ones(2, 5)).sum().backward()
    assert [c.elements for c in state.take_calls()] == [18]
    assert torch.equal(model.bias.grad, torch.full((3,), 2.0))  # the sum over one rank, divided by one

    with pytest.raises(HookError, match=r"parameter weight is torch.float64.*model.float\(\)"):
        register(DistributedDataParallel(torch.nn.Linear(5, 3).double()), ring_states("ring", n=1)[0])
    with pytest.raises(HookError, match="the process group is rank 0 of 1, the hook's state rank 0 of 2"):
        register(DistributedDataParallel(torch.nn.Linear(5, 3)), ring_states("ring", n=2)[0])
