"""Two real models on data that every machine has (no download), and their data order across ranks.

- ``cnn``: a small convolutional network on scikit-learn's digits (1797 8x8 images bundled with the package,
  the same split as hosts.training: SPLIT_SEED), SGD with momentum; metric: test accuracy.
- ``lm``: a small causal transformer language model over bytes, trained on Python's standard library sources
  (a fixed list of modules, read from this interpreter's stdlib), AdamW with linear warm-up; metric:
  validation loss (nats per byte; perplexity is its exp) and next-byte accuracy.

The data order is the same for every method: step k's global batch comes from a generator seeded by (seed,
step), rank r takes the r-th equal slice, as DistributedSampler does; the model's initial parameters come from
torch.manual_seed(seed) (DDP also broadcasts rank 0's at construction).
"""

from __future__ import annotations

import math
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from hosts.training import digits

# Standard-library modules whose source is the language model's text: present in every CPython 3.11+, plain
# ASCII, a few hundred KB together. The last tenth of the concatenation is held out for validation.
LM_SOURCES = ("argparse.py", "textwrap.py", "shlex.py", "string.py", "fnmatch.py", "difflib.py", "heapq.py")
VOCAB = 128  # bytes above 127 (none in these files) would map to '?'
MODELS = ("cnn", "lm")


class ModelError(ValueError):
    """A model name or configuration that cannot be built."""


@dataclass(frozen=True)
class ModelConfig:
    """One model's workload: its size, optimizer and batch. Every rank and the reference run use the same one."""

    name: str = "cnn"
    batch: int = 64  # global: images (cnn) or sequences (lm) per step, split evenly over the ranks
    lr: float = 0.05
    momentum: float = 0.9  # cnn (SGD)
    weight_decay: float = 0.01  # lm (AdamW)
    warmup: int = 10  # lm: steps of linear warm-up
    context: int = 64  # lm: bytes per sequence
    width: int = 64  # lm: model width; cnn: channels of the second convolution
    layers: int = 2  # lm
    heads: int = 4  # lm

    def __post_init__(self) -> None:
        if self.name not in MODELS:
            raise ModelError(f"unknown model {self.name!r}: choose from {', '.join(MODELS)}")
        if self.batch < 1 or self.lr <= 0 or self.width < 1 or self.layers < 1 or self.context < 2:
            raise ModelError(f"{self}: batch, lr, width, layers must be positive and context >= 2")
        if self.name == "lm" and self.width % self.heads:
            raise ModelError(f"lm width {self.width} does not split over {self.heads} heads")

    def shard(self, workers: int) -> int:
        if workers < 1 or self.batch % workers:
            raise ModelError(f"global batch {self.batch} does not split evenly over {workers} ranks")
        return self.batch // workers


def default_config(name: str) -> ModelConfig:
    if name == "cnn":
        return ModelConfig("cnn", batch=64, lr=0.05, width=16)
    if name == "lm":
        return ModelConfig("lm", batch=16, lr=3e-3, width=48, layers=2, heads=4, context=64, warmup=10)
    raise ModelError(f"unknown model {name!r}: choose from {', '.join(MODELS)}")


# -- models ------------------------------------------------------------------------------------------------
class DigitsCNN(nn.Module):
    """Two 3x3 convolutions, a 2x2 max-pool and a linear classifier: 8x8 digits, ten classes."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, width // 2, 3, padding=1)
        self.conv2 = nn.Conv2d(width // 2, width, 3, padding=1)
        self.fc = nn.Linear(width * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class TinyLM(nn.Module):
    """A causal transformer over bytes: embeddings, pre-norm blocks, tied output head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, cfg.width)
        nn.init.normal_(self.tok.weight, std=0.02)  # tied to the head: unit-variance embeddings give huge logits
        self.pos = nn.Parameter(torch.zeros(cfg.context, cfg.width))
        nn.init.normal_(self.pos, std=0.02)
        layer = nn.TransformerEncoderLayer(
            cfg.width, cfg.heads, 2 * cfg.width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.width)
        mask = torch.triu(torch.full((cfg.context, cfg.context), float("-inf")), diagonal=1)
        self.mask = mask  # not a buffer: DDP would broadcast it through Gloo before every forward

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        h = self.tok(idx) + self.pos[:t]
        h = self.blocks(h, mask=self.mask[:t, :t].to(h.dtype), is_causal=True)
        return self.norm(h) @ self.tok.weight.T


def build(cfg: ModelConfig, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return DigitsCNN(cfg.width) if cfg.name == "cnn" else TinyLM(cfg)


def parameter_count(cfg: ModelConfig) -> int:
    return sum(p.numel() for p in build(cfg, 0).parameters())


# -- data --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Data:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@lru_cache(maxsize=1)
def digits_data() -> Data:
    d = digits()
    return Data(
        torch.tensor(d.x_train, dtype=torch.float32).reshape(-1, 1, 8, 8),
        torch.tensor(d.y_train),
        torch.tensor(d.x_test, dtype=torch.float32).reshape(-1, 1, 8, 8),
        torch.tensor(d.y_test),
    )


@lru_cache(maxsize=1)
def text_bytes() -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) byte arrays of the stdlib sources (ModelError if one is missing)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts = []
    for name in LM_SOURCES:
        path = root / name
        if not path.is_file():
            raise ModelError(f"{path} is missing: the language model trains on these stdlib sources")
        parts.append(path.read_bytes())
    data = np.frombuffer(b"\n".join(parts), dtype=np.uint8).copy()
    data[data >= VOCAB] = ord("?")
    cut = int(len(data) * 0.9)
    return data[:cut], data[cut:]


def _step_rng(seed: int, step: int) -> np.random.Generator:
    return np.random.default_rng([seed, 7, step])


def batch(cfg: ModelConfig, seed: int, step: int, rank: int, workers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s slice of step `step`'s global batch (inputs, targets)."""
    shard = cfg.shard(workers)
    rng = _step_rng(seed, step)
    lo = rank * shard
    if cfg.name == "cnn":
        d = digits_data()
        idx = rng.permutation(len(d.y_train))[: cfg.batch][lo : lo + shard]
        return d.x_train[idx], d.y_train[idx]
    train, _ = text_bytes()
    starts = rng.integers(0, len(train) - cfg.context - 1, size=cfg.batch)[lo : lo + shard]
    seq = np.stack([train[s : s + cfg.context + 1] for s in starts]).astype(np.int64)
    t = torch.from_numpy(seq)
    return t[:, :-1], t[:, 1:]


def loss_fn(cfg: ModelConfig, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def correct(out: torch.Tensor, y: torch.Tensor) -> tuple[int, int]:
    """(correct predictions, predictions) of a batch: images, or next bytes."""
    pred = out.argmax(-1)
    return int((pred == y).sum()), int(y.numel())


def optimizer(cfg: ModelConfig, model: nn.Module) -> tuple[torch.optim.Optimizer, Callable[[], None]]:
    """The model's optimizer and the per-step schedule call (lm: linear warm-up, then constant)."""
    if cfg.name == "cnn":
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        return opt, lambda: None
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup)))
    return opt, sched.step


@torch.no_grad()
def evaluate(cfg: ModelConfig, model: nn.Module) -> dict[str, float]:
    """Held-out loss and accuracy (cnn: the digits' test split; lm: 64 fixed windows of the validation text)."""
    model.eval()
    try:
        dtype = next(model.parameters()).dtype
        if cfg.name == "cnn":
            d = digits_data()
            out = model(d.x_test.to(dtype)).float()
            loss = float(F.cross_entropy(out, d.y_test))
            right, total = correct(out, d.y_test)
        else:
            _, val = text_bytes()
            starts = np.linspace(0, len(val) - cfg.context - 1, 64).astype(np.int64)
            seq = torch.from_numpy(np.stack([val[s : s + cfg.context + 1] for s in starts]).astype(np.int64))
            out = model(seq[:, :-1]).float()
            loss = float(loss_fn(cfg, out, seq[:, 1:]))
            right, total = correct(out, seq[:, 1:])
    finally:
        model.train()
    return {"test_loss": loss, "test_acc": right / total, "perplexity": math.exp(min(loss, 50.0))}
