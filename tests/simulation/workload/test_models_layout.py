"""Models count what their papers say; layouts group ranks as Megatron-LM does and refuse what cannot run."""

from __future__ import annotations

import pytest

from simulation.workload.layout import Layout, LayoutError, parse_layout
from simulation.workload.models import MODELS, ModelError, get_model


@pytest.mark.parametrize(
    ("name", "params", "active"),
    [
        ("llama3-8b", 8.0e9, None),  # Llama 3 paper: 8B, 70B, 405B
        ("llama3-70b", 70.6e9, None),
        ("llama3-405b", 405e9, None),
        ("deepseek-v3", 671e9, 37e9),  # DeepSeek-V3 report: 671B total, 37B activated
        ("gpt-1t", 1008e9, None),  # Narayanan et al. Table 1 (its count ties the embedding and the head: 1.3B less)
    ],
)
def test_parameter_counts_match_the_papers(name: str, params: float, active: float | None) -> None:
    m = get_model(name)
    assert m.params() == pytest.approx(params, rel=0.015)
    assert m.active_params() == pytest.approx(active or params, rel=0.015)


def test_hardware_flops_are_narayanans_formula() -> None:
    """96 B s l h^2 (1 + s/6h + V/16lh) per batch of B sequences, with full recomputation (their eq. 3)."""
    for name in ("gpt-145b", "gpt-1t"):
        m = get_model(name)
        s, h, n_layers, v = m.seq_len, m.hidden, m.layers, m.vocab
        theirs = 96 * s * n_layers * h * h * (1 + s / (6 * h) + v / (16 * n_layers * h))
        ours = 3 * m.forward_flops(s) + (m.forward_flops(s) - m.head_flops())  # per token, then x s
        assert ours * s == pytest.approx(theirs, rel=1e-9)
    # a wrong count is caught: dropping the attention scores moves it by more than the tolerance
    m = get_model("gpt-1t")
    assert (
        4 * m.forward_flops(m.seq_len)
        > 4 * (m.forward_flops(m.seq_len) - m.layers * m.attention_core_flops(2048)) * 1.01
    )


def test_unknown_model_is_refused_naming_the_choices() -> None:
    with pytest.raises(ModelError, match="llama3-8b"):
        get_model("llama3-7b")
    assert len(MODELS) >= 10


@pytest.mark.parametrize("dims", [(8, 4, 6, 1), (2, 3, 8, 4), (1, 2, 16, 8)])
def test_every_dimension_partitions_the_ranks(dims: tuple[int, int, int, int]) -> None:
    tp, pp, dp, ep = dims
    lo = Layout(tp=tp, pp=pp, dp=dp, ep=ep)
    n = tp * pp * dp
    for dim, size in (("tp", tp), ("dp", dp), ("pp", pp), ("ep", ep), ("edp", dp // ep)):
        groups = lo.groups(dim)
        flat = sorted(r for g in groups for r in g)
        assert flat == list(range(n)), dim
        assert {len(g) for g in groups} == {size}, dim
    assert lo.groups("tp")[0] == tuple(range(tp))  # TP fastest: consecutive ranks (a server when tp = 8)
    assert lo.groups("dp")[1][0] == 1 if tp > 1 else True
    # expert data parallelism: the ranks holding the same experts, every ep-th data-parallel rank
    assert lo.groups("edp")[0] == tuple(g * ep * tp for g in range(dp // ep))


def test_layout_spec_is_parsed_and_bad_ones_refused_in_one_line() -> None:
    lo = parse_layout("tp=8,pp=16,dp=64,schedule=interleaved,vpp=4,gbs=2048,sharding=zero2,dp-overlap=false")
    assert (lo.tp, lo.pp, lo.dp, lo.vpp, lo.global_batch, lo.dp_overlap) == (8, 16, 64, 4, 2048, False)
    assert lo.microbatches == 32 and lo.gpus == 8192
    for bad, words in (
        ("tp=8,foo=1", "unknown key 'foo'"),
        ("tp=eight", "'eight' is not a int"),
        ("vpp=2", "needs schedule=interleaved"),
        ("dp=6,ep=4", "must divide dp=6"),
        ("dp=4,gbs=6", "not a whole number"),
        ("sharding=zero9", "choose from ddp"),
        ("tp", "want KEY=VALUE"),
    ):
        with pytest.raises(LayoutError, match=words) as ex:
            parse_layout(bad)
        assert "\n" not in str(ex.value)
    with pytest.raises(LayoutError, match="dense"):
        Layout(dp=8, ep=2).check(get_model("llama3-8b"))
    with pytest.raises(LayoutError, match="attention heads"):
        Layout(tp=3).check(get_model("llama3-8b"))


def test_layout_defaults_are_nccl_and_old_names_read_with_a_deprecation(caplog: pytest.LogCaptureFixture) -> None:
    """The baseline a user runs is NCCL; the single-NIC names of before read as the simulator reads them."""
    lo = Layout()
    assert (lo.dp_method, lo.ag_method, lo.tp_method) == ("nccl", "nccl", "nccl-bf16")
    with caplog.at_level("WARNING"):
        old = parse_layout("dp_method=ring,ag_method=ring-bf16,tp_method=tree")
    assert (old.dp_method, old.ag_method, old.tp_method) == ("ring-1nic", "ring-1nic-bf16", "tree-1nic")
    assert sum("is now" in r.getMessage() for r in caplog.records) == 3
    assert Layout.from_dict(old.to_dict()) == old
