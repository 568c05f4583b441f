"""Does it train? A small data-parallel workload: an MLP on scikit-learn's digits, one replica per rank.

Everything a rank needs to take part in synchronous data-parallel SGD, and the
exact reference it is compared with:

- the data: scikit-learn's bundled `load_digits` (1797 8x8 images, no
  download), pixels scaled to [0, 1], a fixed held-out test split
  (``SPLIT_SEED``, the same for every training seed, so runs are compared on
  the same images);
- the model: a multilayer perceptron (ReLU hidden layers, softmax
  cross-entropy) in plain numpy, its parameters one flat float64 vector, so
  its gradient is one flat tensor to all-reduce;
- the data order: a global minibatch per step from a seeded permutation per
  epoch (as torch's DistributedSampler does it), rank r computing the
  gradient of the r-th equal slice of it;
- one rank's replica (``Replica``): gradient of its slice (float64, sent as
  float32: every all-reduce method takes float32), then the update every rank
  applies identically from the all-reduced sum, ``g = sum / workers``, SGD with
  momentum. Ranks that get the same sum hold bit-identical parameters; a
  digest of them per step (``params_digest``) lets the runner compare;
- ``run_segment``: the loop an agent (hosts.agent) runs over its own workers,
  timed on the shared clock as every other step (hosts.clock);
- ``simulate``: all ranks in one process with an all-reduce given as a
  function; with ``exact_allreduce`` (float64 sum of the float32 gradients)
  it is the reference run, with ``mis_scaled`` the negative control.

The numbers (hidden width 32, global batch 64, lr 0.1, momentum 0.9, 300
steps, about 13 epochs) reach 96-97% test accuracy in float64: enough to see
whether an all-reduce costs accuracy, small enough (2410 parameters, about ten
256-lane packets) that a step through Python switches takes tens of ms.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from typing import Any

import numpy as np

from hosts import clock

LOG = logging.getLogger(__name__)

SPLIT_SEED = 2024  # the train/test split: fixed, whatever the training seed, so every run is tested on the same images

# Final test accuracy of a method must be within this many percentage points of the exact run's. Why 2:
# the test split has 359 images (one image is 0.28 points), and at the ~97% the exact run reaches, the
# binomial standard error of an accuracy measured on them is sqrt(0.97 * 0.03 / 359) = 0.9 points, so 2 points
# is about two standard errors: a smaller difference says more about which images happen to be in the test
# split than about the all-reduce. That is the resolution at which SwitchML's claim ("training with its
# fixed point reaches the same accuracy as with float") is checkable here; the spread of the exact run over
# training seeds (reported beside it, ~1 point) is of the same size. A wrong all-reduce scale (mis_scaled,
# 2^-7) costs tens of points and fails it.
ACCURACY_TOLERANCE_PP = 2.0
BROKEN_SCALE = 2.0**-7  # the negative control: the sum decoded with an exponent 7 off (a fixed-point slip)


class TrainingError(RuntimeError):
    """A training run that cannot go on (non-finite loss, ranks that disagree, a bad configuration)."""


@dataclass(frozen=True)
class TrainConfig:
    """The workload: model, optimizer, data order. Every rank and the reference run use the same one."""

    hidden: tuple[int, ...] = (32,)  # widths of the ReLU hidden layers
    steps: int = 300
    batch: int = 64  # global minibatch per step, split evenly over the workers
    lr: float = 0.1
    momentum: float = 0.9
    seed: int = 0  # initial parameters and data order
    test_fraction: float = 0.2
    eval_every: int = 10  # test accuracy after every this many steps (and at 0 and the last)

    def __post_init__(self) -> None:
        if not self.hidden or any(int(h) < 1 for h in self.hidden):
            raise TrainingError(f"hidden layers {self.hidden}: each needs >= 1 unit")
        if self.steps < 1 or self.batch < 1 or self.eval_every < 1:
            raise TrainingError(
                f"steps ({self.steps}), batch ({self.batch}) and eval_every ({self.eval_every}) must be >= 1"
            )
        if not (self.lr > 0 and 0 <= self.momentum < 1):
            raise TrainingError(f"lr {self.lr} must be > 0 and momentum {self.momentum} in [0, 1)")
        if not 0 < self.test_fraction < 1:
            raise TrainingError(f"test_fraction {self.test_fraction} must be in (0, 1)")

    def eval_steps(self) -> list[int]:
        """Steps after which the parameters are evaluated: 0 (the initial ones), every eval_every, the last."""
        return sorted({0, self.steps, *range(self.eval_every, self.steps + 1, self.eval_every)})

    def shard(self, workers: int) -> int:
        """Samples per rank and step."""
        if workers < 1 or self.batch % workers:
            raise TrainingError(f"global batch {self.batch} does not split evenly over {workers} workers")
        return self.batch // workers

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        if "hidden" in kw:
            kw["hidden"] = tuple(int(h) for h in kw["hidden"])
        return cls(**kw)


# -- data -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dataset:
    x_train: np.ndarray  # float64, (n, features), in [0, 1]
    y_train: np.ndarray  # int64 class labels
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def features(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def classes(self) -> int:
        return int(max(self.y_train.max(), self.y_test.max())) + 1


@lru_cache(maxsize=4)
def digits(test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's digits (bundled with the package), split once with SPLIT_SEED."""
    from sklearn.datasets import load_digits  # imported here: 0.8 s, paid only by processes that train

    x, y = load_digits(return_X_y=True)
    x = np.asarray(x, dtype=np.float64) / 16.0  # pixel values are 0..16
    y = np.asarray(y, dtype=np.int64)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    for a in (x, y):
        a.setflags(write=False)
    return Dataset(x[train], y[train], x[test], y[test])


def batch_indices(cfg: TrainConfig, n_train: int, step: int, rank: int, workers: int) -> np.ndarray:
    """Training-set indices of rank `rank`'s slice of step `step`'s global minibatch (steps count from 1).

    Each epoch is a permutation seeded by (seed, epoch); an epoch has n_train // batch full minibatches (the
    remainder is dropped, so every step has the same batch); rank r takes the r-th of `workers` equal slices.
    """
    if step < 1:
        raise TrainingError(f"step {step}: steps count from 1")
    per_epoch = n_train // cfg.batch
    if per_epoch < 1:
        raise TrainingError(f"global batch {cfg.batch} is larger than the training set ({n_train})")
    epoch, k = divmod(step - 1, per_epoch)
    perm = _epoch_permutation(cfg.seed, epoch, n_train)
    b = cfg.shard(workers)
    start = k * cfg.batch + rank * b
    return perm[start : start + b]


@lru_cache(maxsize=8)
def _epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    perm = np.random.default_rng([seed, 1, epoch]).permutation(n)
    perm.setflags(write=False)
    return perm


# -- the model --------------------------------------------------------------------------------------
class MLP:
    """ReLU hidden layers and a softmax output; parameters are one flat float64 vector [W1, b1, W2, b2, ...]."""

    def __init__(self, features: int, hidden: Sequence[int], classes: int) -> None:
        self.widths = (features, *(int(h) for h in hidden), classes)
        self.shapes: list[tuple[int, ...]] = []
        for a, b in zip(self.widths[:-1], self.widths[1:]):
            self.shapes += [(a, b), (b,)]
        self.offsets = np.cumsum([0] + [math.prod(s) for s in self.shapes]).tolist()
        self.size = int(self.offsets[-1])

    def init(self, seed: int) -> np.ndarray:
        """He-normal weights, zero biases, from the seed alone (every rank draws the same)."""
        rng = np.random.default_rng([seed, 0])
        theta = np.zeros(self.size)
        for (w, _b), fan_in in zip(self._pairs(theta), self.widths[:-1]):
            w[...] = rng.normal(0.0, math.sqrt(2.0 / fan_in), w.shape)
        return theta

    def _pairs(self, theta: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(W, b) of every layer, as views into theta (so writing them writes theta)."""
        if theta.shape != (self.size,):
            raise TrainingError(f"parameter vector of shape {theta.shape}, the model has {self.size}")
        views = [theta[lo:hi].reshape(s) for lo, hi, s in zip(self.offsets[:-1], self.offsets[1:], self.shapes)]
        return list(zip(views[0::2], views[1::2]))

    def logits(self, theta: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self._forward(theta, x)[1]

    def _forward(self, theta: np.ndarray, x: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        acts = [x]
        pairs = self._pairs(theta)
        a = x
        for w, b in pairs[:-1]:
            a = np.maximum(a @ w + b, 0.0)
            acts.append(a)
        w, b = pairs[-1]
        return acts, a @ w + b

    @staticmethod
    def _log_softmax(z: np.ndarray) -> np.ndarray:
        z = z - z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    def loss(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        """Mean cross-entropy."""
        logp = self._log_softmax(self.logits(theta, x))
        return float(-logp[np.arange(len(y)), y].mean())

    def accuracy(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        return float((self.logits(theta, x).argmax(axis=1) == y).mean())

    def loss_and_grad(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, int]:
        """(mean cross-entropy, its gradient as a flat vector, correct predictions) on one batch (backprop)."""
        acts, z = self._forward(theta, x)
        logp = self._log_softmax(z)
        n = len(y)
        rows = np.arange(n)
        loss = float(-logp[rows, y].mean())
        correct = int((z.argmax(axis=1) == y).sum())
        delta = np.exp(logp)
        delta[rows, y] -= 1.0
        delta /= n  # d loss / d logits
        grad = np.zeros(self.size)
        pairs = self._pairs(theta)
        grads = self._pairs(grad)
        for layer in range(len(pairs) - 1, -1, -1):
            a = acts[layer]
            gw, gb = grads[layer]
            gw[...] = a.T @ delta
            gb[...] = delta.sum(axis=0)
            if layer:
                delta = (delta @ pairs[layer][0].T) * (a > 0)
        return loss, grad, correct


def model_for(cfg: TrainConfig, data: Dataset) -> MLP:
    return MLP(data.features, cfg.hidden, data.classes)


def params_digest(theta: np.ndarray) -> str:
    """A fingerprint of the exact float64 parameters: equal digests, equal bits."""
    return hashlib.sha256(np.ascontiguousarray(theta, dtype="<f8").tobytes()).hexdigest()[:16]


def encode_params(theta: np.ndarray) -> str:
    """The parameters as text (base64 of the float64 bytes) for a JSON report: decoded bit for bit."""
    return base64.b64encode(np.ascontiguousarray(theta, dtype="<f8").tobytes()).decode("ascii")


def decode_params(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f8").copy()


@dataclass(frozen=True)
class Evaluation:
    step: int
    train_loss: float  # on the whole training set
    test_loss: float
    test_acc: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def evaluate(model: MLP, data: Dataset, theta: np.ndarray, step: int) -> Evaluation:
    """Off the clock: the runner evaluates snapshots; the training loop never does."""
    return Evaluation(
        step,
        model.loss(theta, data.x_train, data.y_train),
        model.loss(theta, data.x_test, data.y_test),
        model.accuracy(theta, data.x_test, data.y_test),
    )


# -- one rank's replica --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Gradient:
    grad: np.ndarray  # float32: what goes into the all-reduce
    loss: float  # on this rank's slice of the minibatch
    correct: int


class Replica:
    """One rank's copy of the model and optimizer; `step` = updates applied so far."""

    def __init__(self, cfg: TrainConfig, rank: int, workers: int, data: Dataset | None = None) -> None:
        if not 0 <= rank < workers:
            raise TrainingError(f"rank {rank} not in 0..{workers - 1}")
        cfg.shard(workers)  # refuses a batch that does not split
        self.cfg, self.rank, self.workers = cfg, rank, workers
        self.data = data if data is not None else digits(cfg.test_fraction)
        self.model = model_for(cfg, self.data)
        self.theta = self.model.init(cfg.seed)
        self.velocity = np.zeros_like(self.theta)
        self.step = 0

    def gradient(self) -> Gradient:
        """The gradient of this rank's slice of the next step's minibatch (the mean loss over the slice)."""
        idx = batch_indices(self.cfg, len(self.data.y_train), self.step + 1, self.rank, self.workers)
        loss, grad, correct = self.model.loss_and_grad(self.theta, self.data.x_train[idx], self.data.y_train[idx])
        if not math.isfinite(loss):
            raise TrainingError(f"rank {self.rank}, step {self.step + 1}: the loss is {loss}")
        return Gradient(grad.astype(np.float32), loss, correct)

    def apply(self, summed: np.ndarray) -> None:
        """The update from the all-reduced sum of every rank's gradient: the same arithmetic on every rank."""
        if summed.shape != self.theta.shape:
            raise TrainingError(f"all-reduce returned shape {summed.shape}, expected {self.theta.shape}")
        g = np.asarray(summed, dtype=np.float64) / self.workers
        self.velocity *= self.cfg.momentum
        self.velocity += g
        self.theta -= self.cfg.lr * self.velocity
        self.step += 1

    def digest(self) -> str:
        return params_digest(self.theta)


# -- the loop an agent runs ---------------------------------------------------------------------------
AllreduceFn = Callable[[np.ndarray], tuple[np.ndarray, Any]]  # gradient -> (float32 sum, AllreduceStats)
BarrierFn = Callable[[str, int], float]  # (tag, tensor size) -> release instant on hosts.clock


def run_segment(
    replica: Replica,
    count: int,
    allreduce: AllreduceFn,
    barrier: BarrierFn,
    tag: str,
    snapshots: bool = False,
    end_barrier: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, str], float | None]:
    """Take `count` steps; per step one record of times (hosts.clock) and figures.

    A step: gradient of this rank's slice (t_begin -> t_ready), the step's barrier (its release, common to
    every rank, starts the all-reduce, as in every other experiment), the all-reduce (until t_done, when the
    float32 sum is complete; the call returns at t_back, later for a host method that still waits for its
    last acknowledgements), the update and the digest (t_back -> t_end). With `snapshots`, the parameters after
    every evaluation step go back to the runner, which evaluates them off the clock. `end_barrier` meets the
    other ranks once more after the last step, so the last step's period ends on a common instant too.
    Returns (records, {step: encoded parameters}, the end barrier's release or None).
    """
    eval_at = set(replica.cfg.eval_steps())
    snaps: dict[str, str] = {}
    if snapshots and replica.step == 0 and 0 in eval_at:  # the initial parameters (later ones end a step below)
        snaps["0"] = encode_params(replica.theta)
    records = []
    for _ in range(count):
        if replica.step >= replica.cfg.steps:
            raise TrainingError(
                f"rank {replica.rank}: asked for step {replica.step + 1} of a {replica.cfg.steps}-step run"
            )
        t_begin = clock.now()
        g = replica.gradient()
        t_ready = clock.now()
        step = replica.step + 1
        released = barrier(f"{tag}-{step}", g.grad.size)
        summed, stats = allreduce(g.grad)
        t_back = clock.now()
        t_done = float(getattr(stats, "t_done", 0.0)) or t_back
        replica.apply(summed)
        digest = replica.digest()
        t_end = clock.now()
        records.append(
            {
                "step": step,
                "t_begin": t_begin,
                "t_ready": t_ready,
                "t_release": released,
                "t_done": t_done,
                "t_back": t_back,
                "t_end": t_end,
                "loss": g.loss,
                "correct": g.correct,
                "digest": digest,
                "sum_digest": hashlib.sha256(np.ascontiguousarray(summed, dtype=np.float32).tobytes()).hexdigest()[:16],
                "retransmissions": int(getattr(stats, "retransmissions", 0)),
                "bytes_sent": int(getattr(stats, "bytes_sent", 0)),
            }
        )
        if snapshots and step in eval_at:
            snaps[str(step)] = encode_params(replica.theta)
    end = barrier(f"{tag}-end", replica.theta.size) if end_barrier else None
    return records, snaps, end


# -- all ranks in one process: the reference run and the controls ---------------------------------------
ReduceFn = Callable[[Sequence[np.ndarray]], list[np.ndarray]]  # every rank's gradient -> every rank's sum


def exact_allreduce(grads: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The float64 sum of the ranks' float32 gradients (in rank order), the same for every rank: the reference."""
    total = np.zeros(grads[0].shape, dtype=np.float64)
    for g in grads:
        total += g
    return [total] * len(grads)


def mis_scaled(reduce: ReduceFn, factor: float = BROKEN_SCALE) -> ReduceFn:
    """A deliberately broken all-reduce: the right sum times a wrong factor (the control the check must catch)."""

    def broken(grads: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [s * factor for s in reduce(grads)]

    return broken


@dataclass
class History:
    """One training run: per step the minibatch loss and accuracy and every rank's digest; the evaluations."""

    method: str
    workers: int
    steps: list[dict[str, Any]] = field(default_factory=list)  # step, loss, batch_acc, digests
    evals: list[Evaluation] = field(default_factory=list)

    @property
    def final(self) -> Evaluation:
        return self.evals[-1]

    def diverged_at(self) -> int | None:
        """The first step after which the ranks' parameters differ (None: identical throughout)."""
        return next((s["step"] for s in self.steps if len(set(s["digests"])) > 1), None)


def simulate(
    cfg: TrainConfig,
    workers: int,
    reduce: ReduceFn = exact_allreduce,
    method: str = "exact",
    data: Dataset | None = None,
) -> History:
    """Train with every rank in this process and `reduce` as the all-reduce (the reference run: exact_allreduce)."""
    data = data if data is not None else digits(cfg.test_fraction)
    replicas = [Replica(cfg, r, workers, data) for r in range(workers)]
    model = replicas[0].model
    history = History(method, workers)
    eval_at = set(cfg.eval_steps())
    if 0 in eval_at:
        history.evals.append(evaluate(model, data, replicas[0].theta, 0))
    shard = cfg.shard(workers)
    for step in range(1, cfg.steps + 1):
        grads = [r.gradient() for r in replicas]
        sums = reduce([g.grad for g in grads])
        with np.errstate(over="ignore", invalid="ignore"):
            for r, s in zip(replicas, sums):
                r.apply(s)
        history.steps.append(
            {
                "step": step,
                "loss": float(np.mean([g.loss for g in grads])),
                "batch_acc": sum(g.correct for g in grads) / (shard * workers),
                "digests": [r.digest() for r in replicas],
            }
        )
        if step in eval_at:
            with np.errstate(over="ignore", invalid="ignore"):
                history.evals.append(evaluate(model, data, replicas[0].theta, step))
    return history


def within_tolerance(acc: float, reference_acc: float, tolerance_pp: float = ACCURACY_TOLERANCE_PP) -> bool:
    """The training check: final test accuracy within tolerance_pp percentage points of the exact run's.

    Two-sided: a method far above the reference would say the tolerance is below the noise of the
    measurement, which is as much a finding as one far below. A NaN accuracy (a diverged run) fails.
    """
    return math.isfinite(acc) and abs(acc - reference_acc) * 100.0 <= tolerance_pp
