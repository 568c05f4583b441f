"""Named models: a decoder transformer's shape, its parameters and its FLOPs per token.

Every model is the shape its authors published (the source is on the model), and the counts follow from the
shape: parameters of the attention projections (grouped-query or, for DeepSeek-V3, multi-head latent attention
given as its projection sizes), the MLP (gated SwiGLU with three matrices, or GeLU with two), the experts of a
mixture-of-experts layer (routed, top-k, plus shared experts), the embedding and the output head.

FLOPs follow the convention of Narayanan et al. 2021 and of PaLM's MFU: 2 FLOPs per multiply-add of every
weight a token meets, plus the attention scores and their weighted sum over the whole sequence (2 s d each per
head, not halved for the causal mask); the backward pass is twice the forward.  Model FLOPs (for MFU) count
forward + backward once; hardware FLOPs add what activation recomputation runs again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


class ModelError(ValueError):
    """An unknown model or a shape that does not describe one; the message names the field."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    source: str
    layers: int
    hidden: int
    heads: int
    head_dim: int
    kv_heads: int
    ffn: int  # MLP width of a dense layer
    vocab: int
    seq_len: int  # the sequence length its published training used
    gated_mlp: bool = True  # SwiGLU: three matrices (Llama, DeepSeek); False: two (GPT-3's GeLU MLP)
    # attention given by its projection sizes instead of heads x head_dim (multi-head latent attention):
    attn_params: int = 0  # weights of one layer's attention projections (0: from heads, kv_heads, head_dim)
    qk_dim: int = 0  # per-head query/key width of the scores (0: head_dim)
    v_dim: int = 0  # per-head value width (0: head_dim)
    # mixture of experts (experts = 0: dense)
    experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    shared_experts: int = 0
    dense_layers: int = 0  # the first layers keep a dense MLP of width `ffn`

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "head_dim", "kv_heads", "ffn", "vocab", "seq_len"):
            if getattr(self, f) < 1:
                raise ModelError(f"model {self.name!r}: {f} must be >= 1")
        if self.experts and not (1 <= self.top_k <= self.experts and self.expert_ffn >= 1):
            raise ModelError(f"model {self.name!r}: an MoE model needs 1 <= top_k <= experts and expert_ffn >= 1")

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0

    def attention_params(self) -> int:
        if self.attn_params:
            return self.attn_params
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return self.hidden * (2 * q + 2 * kv)  # Q and O, K and V

    def mlp_params(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * width

    def expert_params(self) -> int:
        """One routed expert's weights."""
        return self.mlp_params(self.expert_ffn)

    def layer_params(self, moe_layer: bool) -> tuple[int, int]:
        """(weights every token of a layer meets besides the experts, the routed experts' weights) of one layer."""
        if not moe_layer:
            return self.attention_params() + self.mlp_params(self.ffn), 0
        shared = self.shared_experts * self.expert_params() + self.hidden * self.experts  # and the router
        return self.attention_params() + shared, self.experts * self.expert_params()

    def params(self) -> int:
        dense = self.layers - self.moe_layers
        a, _ = self.layer_params(False)
        b, e = self.layer_params(True)
        return dense * a + self.moe_layers * (b + e) + 2 * self.vocab * self.hidden

    def active_params(self) -> int:
        """Weights one token meets (embedding and head included): what 6N counts."""
        dense = self.layers - self.moe_layers
        a, _ = self.layer_params(False)
        b, _ = self.layer_params(True)
        return dense * a + self.moe_layers * (b + self.top_k * self.expert_params()) + 2 * self.vocab * self.hidden

    def attention_core_flops(self, seq_len: int) -> float:
        """Forward FLOPs per token per layer of the scores and the weighted sum (not the projections)."""
        qk = self.qk_dim or self.head_dim
        v = self.v_dim or self.head_dim
        return 2.0 * seq_len * self.heads * (qk + v)

    def layer_flops(self, moe_layer: bool, seq_len: int) -> float:
        """Forward FLOPs per token of one layer."""
        a, _ = self.layer_params(moe_layer)
        experts = self.top_k * self.expert_params() if moe_layer else 0
        return 2.0 * (a + experts) + self.attention_core_flops(seq_len)

    def head_flops(self) -> float:
        """Forward FLOPs per token of the output head (the embedding lookup is free)."""
        return 2.0 * self.hidden * self.vocab

    def forward_flops(self, seq_len: int) -> float:
        """Forward FLOPs per token of the whole model."""
        dense = self.layers - self.moe_layers
        return (
            dense * self.layer_flops(False, seq_len)
            + self.moe_layers * self.layer_flops(True, seq_len)
            + self.head_flops()
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["params"] = self.params()
        d["active_params"] = self.active_params()
        return d


LLAMA3 = "Llama 3 paper (Grattafiori et al. 2024, arXiv:2407.21783) Table 3"
NARAYANAN = "Narayanan et al. 2021 (SC'21, arXiv:2104.04473) Table 1: GPT, vocabulary 51,200, sequence 2048"


def _gpt(name: str, layers: int, hidden: int, heads: int) -> ModelSpec:
    return ModelSpec(
        name=name,
        source=NARAYANAN,
        layers=layers,
        hidden=hidden,
        heads=heads,
        head_dim=hidden // heads,
        kv_heads=heads,
        ffn=4 * hidden,
        vocab=51200,
        seq_len=2048,
        gated_mlp=False,
    )


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("llama3-8b", LLAMA3, 32, 4096, 32, 128, 8, 14336, 128256, 8192),
        ModelSpec("llama3-70b", LLAMA3, 80, 8192, 64, 128, 8, 28672, 128256, 8192),
        ModelSpec("llama3-405b", LLAMA3, 126, 16384, 128, 128, 8, 53248, 128256, 8192),
        _gpt("gpt-39b", 48, 8192, 64),
        _gpt("gpt-76b", 60, 10240, 80),
        _gpt("gpt-145b", 80, 12288, 96),
        _gpt("gpt-310b", 96, 16384, 128),
        _gpt("gpt-530b", 105, 20480, 128),
        _gpt("gpt-1t", 128, 25600, 160),
        # DeepSeek-V3 technical report (arXiv:2412.19437) section 4.2 and its config.json: 61 layers (first 3
        # dense), hidden 7168, MLA with 128 heads (q LoRA rank 1536, kv LoRA rank 512, 128 + 64 query/key and
        # 128 value dims a head), 256 routed experts of width 2048, top-8, one shared expert, vocabulary 129,280,
        # sequence 4096. MLA's projections: 7168x1536 + 1536x128x192 + 7168x576 + 512x128x256 + 128x128x7168.
        ModelSpec(
            "deepseek-v3",
            "DeepSeek-V3 technical report (arXiv:2412.19437) section 4.2",
            61,
            7168,
            128,
            128,
            128,
            18432,
            129280,
            4096,
            attn_params=7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168,
            qk_dim=192,
            v_dim=128,
            experts=256,
            top_k=8,
            expert_ffn=2048,
            shared_experts=1,
            dense_layers=3,
        ),
    )
}


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise ModelError(f"unknown model {name!r}: choose from {', '.join(MODELS)}") from None
