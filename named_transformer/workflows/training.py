r"""The training loop: AdamW, warm-up, label smoothing, clipping, checkpoints.

The learning rate follows the paper's §5.3 ("Noam") schedule, linear warm-up then decay
with the inverse square root of the step $s$ (counted from 1):

$$\text{lr}(s) = \text{factor} \cdot |\mathsf{layer}|^{-1/2} \cdot \min\left(s^{-1/2},\;
  s \cdot \text{warmup}^{-3/2}\right).$$

The loss is the cross-entropy with label smoothing $\epsilon_{ls} = 0.1$ (paper §5.4),
summed over the target tokens that are not padding and divided by their number.

**Exact resumption.** The batch of step $s$ is drawn from a generator seeded by
$(\text{seed}, s)$, so it does not depend on what ran before; a checkpoint stores the
weights, the config, the optimizer, the scheduler, the step and the random-number state
(dropout), so an interrupted and resumed run ends with the same weights as an
uninterrupted one (a test checks it).

**Several processes.** Under ``torchrun --nproc_per_node=N`` (gloo on CPU,
``OMP_NUM_THREADS=1`` per rank) the model is wrapped in ``DistributedDataParallel`` and
rank $r$ takes rows $r, r+N, \dots$ of the same global batch. Each rank's summed loss is
divided by the number of target tokens in the *global* batch and multiplied by $N$, so
DDP's gradient average equals the gradient of the single-process loss on that batch.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.workflows.threads import with_suited_threads

__all__ = [
    "CheckpointError",
    "TrainConfig",
    "Trainer",
    "TrainingInterrupted",
    "init_distributed",
    "load_checkpoint",
    "noam_rate",
    "smoothed_cross_entropy",
]


# --8<-- [start:noam_rate]
def noam_rate(step: int, layer: int, warmup: int, factor: float = 1.0) -> float:
    r"""The warm-up ("Noam") learning rate at step $s \ge 1$.

    $$\text{factor} \cdot |\mathsf{layer}|^{-1/2}
      \min(s^{-1/2}, s \cdot \text{warmup}^{-3/2})$$
    """
    if step < 1 or warmup < 1 or layer < 1:
        raise ValueError(
            f"need step, warmup, layer >= 1, got {step}, {warmup}, {layer}"
        )
    return factor * layer**-0.5 * min(step**-0.5, step * warmup**-1.5)


# --8<-- [end:noam_rate]


# --8<-- [start:smoothed_cross_entropy]
@checked
def smoothed_cross_entropy(
    log_probs: Float[Tensor, "*batch vocab"],
    targets: Int[Tensor, "*batch"],
    ignore: int,
    smoothing: float = 0.1,
) -> tuple[Float[Tensor, ""], Int[Tensor, ""]]:
    r"""Label-smoothed cross-entropy, summed over targets $\ne$ ``ignore``.

    Returns the sum and the number of those targets. The target distribution puts
    $1-\epsilon$ on the right token and spreads $\epsilon$ uniformly over the vocabulary
    (PyTorch's ``label_smoothing``); ``log_probs`` may be log-probabilities or logits (a
    log-softmax of log-probabilities changes nothing).
    """
    flat = rearrange(log_probs, "... vocab -> (...) vocab")
    flat_targets = rearrange(targets, "... -> (...)")
    loss = F.cross_entropy(
        flat,
        flat_targets,
        ignore_index=ignore,
        label_smoothing=smoothing,
        reduction="sum",
    )
    return loss, (flat_targets != ignore).sum()


# --8<-- [end:smoothed_cross_entropy]


@dataclass
class TrainConfig:
    """How to train. Defaults: the paper's AdamW betas/eps, warm-up, label smoothing."""

    steps: int = 1000
    batch_size: int = 64
    layer: int = 64  # |layer| in the schedule
    warmup: int = 400
    factor: float = 1.0
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    eval_every: int = 0  # 0: evaluate only at the end
    checkpoint_every: int = (
        0  # 0: checkpoint only at the end (when a directory is given)
    )
    log_every: int = 10
    seed: int = 0
    progress: bool = True
    max_seconds: float | None = None  # stop after this long (checked every step)

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        for name in ("steps", "batch_size", "layer", "warmup"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}"
                )
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(
                f"label_smoothing must be in [0, 1), got {self.label_smoothing}"
            )
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise ValueError(
                f"TrainConfig.max_seconds must be > 0, got {self.max_seconds}"
            )


@dataclass
class Record:
    """One logged step: training loss/token, learning rate, throughput, evaluation."""

    step: int
    loss: float
    lr: float
    tokens_per_second: float
    metrics: dict[str, float] = field(default_factory=dict)


def init_distributed() -> tuple[int, int]:
    """Join the process group under ``torchrun`` (gloo); return (rank, world size)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("gloo")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _Progress:
    """A progress bar (tqdm) on a terminal. On a pipe or in a log: a line at the first
    step, at each evaluation and every twentieth of the run, so logs stay short; and
    whenever :attr:`QUIET` seconds pass with no line (slow steps, an evaluation on a
    busy machine), the latest step's line again, saying what runs now, so a run is
    never silent."""

    QUIET = 10.0  # seconds: the longest a log goes without a line

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        self.total, self.enabled, self.bar = total, enabled, None
        self.every, self.shown = max(total // 20, 1), False
        self.latest, self.doing = f"step {initial}/{total}", ""
        self.last = time.perf_counter()
        self.lock, self.done = threading.Lock(), threading.Event()
        if not enabled:
            return
        if not sys.stderr.isatty():
            # A daemon thread: it only prints, and dies with the process.
            threading.Thread(target=self._heartbeat, daemon=True).start()
            return
        try:
            from tqdm import tqdm
        except ImportError as error:
            raise ImportError(
                "the progress bar needs tqdm, which is in the `train` extra: "
                "pip install -e '.[train]' in a clone (or pass progress=False)"
            ) from error
        self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)

    def _line(self, text: str) -> None:
        with self.lock:
            print(text, file=sys.stderr, flush=True)
            self.last = time.perf_counter()

    def _heartbeat(self) -> None:
        while not self.done.wait(min(1.0, self.QUIET)):
            if time.perf_counter() - self.last >= self.QUIET:
                doing = f"  ({self.doing})" if self.doing else ""
                self._line(self.latest + doing)

    def working(self, doing: str) -> None:
        """What the run does now (``evaluating``), for the line of a quiet spell."""
        self.doing = doing

    def show(
        self, step: int, loss: float, rate: float, metrics: dict[str, float]
    ) -> None:
        shown = {k: f"{v:.3g}" for k, v in metrics.items()}
        self.latest = f"step {step}/{self.total}  loss {loss:.3f}  {rate:,.0f} tok/s"
        self.doing = ""
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:,.0f}", **shown)
            return
        due = not self.shown or metrics or step % self.every == 0
        if self.enabled and (due or step == self.total):
            scores = "".join(f"  {k} {v}" for k, v in shown.items())
            self._line(self.latest + scores)
            self.shown = True

    def note(self, text: str) -> None:
        """A line of its own (in a log) or beside the bar (on a terminal)."""
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        elif self.enabled:
            self._line(text)

    def close(self) -> None:
        self.done.set()
        if self.bar is not None:
            self.bar.close()


class _Interrupt:
    """Ctrl-C while training: finish the step, then stop (a second Ctrl-C stops now).

    One process only: under ``torchrun`` the ranks would stop at different steps and
    leave each other waiting in a collective, so Ctrl-C keeps its usual meaning there.
    """

    def __init__(self, enabled: bool) -> None:
        self.requested, self.previous, self.enabled = False, None, enabled

    def __enter__(self) -> _Interrupt:
        if self.enabled and threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._request)
        return self

    def _request(self, *_: Any) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, self.previous)

    def __exit__(self, *_: Any) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped :meth:`Trainer.fit` after ``step``; ``checkpoint`` is the file
    this trainer last wrote or resumed from (at step ``checkpoint_step``), or None
    when there is none, so a message never names a file that does not exist."""

    def __init__(
        self, step: int, checkpoint: Path | None, checkpoint_step: int | None
    ) -> None:
        super().__init__(f"training interrupted after step {step}")
        self.step, self.checkpoint = step, checkpoint
        self.checkpoint_step = checkpoint_step


def _optimizer(
    model: nn.Module, config: TrainConfig
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with the paper's betas and eps, its rate given wholly by the schedule."""
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=1.0,
        betas=config.betas,
        eps=config.eps,
        weight_decay=config.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: noam_rate(s + 1, config.layer, config.warmup, config.factor),
    )
    return optimizer, scheduler


LossFunction = Callable[[nn.Module, Any], tuple[Tensor, Tensor]]


# --8<-- [start:Trainer]
class Trainer:
    """Train ``model`` on ``data`` with AdamW and the Noam schedule.

    Args:
        model: any ``nn.Module``.
        data: the training examples; the batch of step ``s`` is ``collate`` applied to
            ``batch_size`` of them drawn with a generator seeded by ``(seed, s)``.
        collate: turns a list of examples into a batch (with a ``.to(device)``, or any
            object ``loss`` understands).
        loss: ``loss(model, batch) -> (summed loss, number of target tokens)``.
        config: a :class:`TrainConfig`.
        evaluate: ``evaluate(model) -> {name: value}``, run every ``eval_every`` steps
            and at the end, in eval mode, without gradients, leaving the random state
            as it was.
        directory: where ``checkpoint.pt`` is written (rank 0 only).
        meta: anything JSON-like saved in the checkpoint (model config, vocabulary …).

    Early stopping: assign ``trainer.stop``, a ``stop(metrics) -> bool`` asked after
    each evaluation (True ends training, e.g. once the validation score is perfect).
    It is set on the trainer, not passed in, because a rule usually reads the
    trainer's own history (:func:`~named_transformer.workflows.runner.train_task`'s
    "``patience`` evaluations in a row").
    """

    def __init__(
        self,
        model: nn.Module,
        data: Sequence[Any],
        collate: Callable[[list[Any]], Any],
        loss: LossFunction,
        config: TrainConfig,
        evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
        directory: str | Path | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        if not data:
            raise ValueError("Trainer needs at least one training example")
        self.rank, self.world = init_distributed()
        if config.batch_size % self.world:
            raise ValueError(
                f"batch_size={config.batch_size} must be divisible by the "
                f"{self.world} processes"
            )
        self.model = model
        self.data, self.collate, self.loss, self.config = data, collate, loss, config
        self.evaluate, self.meta = evaluate, dict(meta or {})
        self.stop: Callable[[dict[str, float]], bool] | None = None
        self.directory = None if directory is None else Path(directory)
        self.parallel: nn.Module = model
        if self.world > 1:
            self.parallel = nn.parallel.DistributedDataParallel(model)
        self.optimizer, self.scheduler = _optimizer(model, config)
        self.step = 0
        self.history: list[Record] = []
        # The checkpoint this trainer last wrote or loaded, and its step: what an
        # interruption may name.
        self.checkpoint: Path | None = None
        self.checkpoint_step: int | None = None

    def batch_indices(self, step: int) -> list[int]:
        """The global batch of ``step``: a function of (seed, step) only."""
        seed = self.config.seed * 1_000_003 + step
        generator = torch.Generator().manual_seed(seed)
        size = (self.config.batch_size,)
        return torch.randint(len(self.data), size, generator=generator).tolist()

    def train_step(self) -> tuple[float, int]:
        """One optimizer step on the global batch of ``self.step``.

        Returns (loss/token, tokens).
        """
        indices = self.batch_indices(self.step)[self.rank :: self.world]
        batch = self.collate([self.data[i] for i in indices])
        self.model.train()
        total, count = self.loss(self.parallel, batch)
        stats = torch.tensor([total.item(), count.item()], dtype=torch.float64)
        if self.world > 1:
            dist.all_reduce(stats)
        tokens = max(int(stats[1]), 1)
        (total * self.world / tokens).backward()
        if self.config.clip_norm > 0:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.step += 1
        return float(stats[0]) / tokens, tokens

    @with_suited_threads  # one thread for a small model or on a busy machine
    def fit(self, until: int | None = None) -> list[Record]:
        """Train up to step ``until`` (default ``config.steps``); return the history.

        Stops early when ``stop`` says so after an evaluation, or once
        ``config.max_seconds`` have passed (checked after every step; the model is
        then evaluated, so the run ends with a score). Ctrl-C finishes the step,
        saves the checkpoint and raises :class:`TrainingInterrupted`; a second
        Ctrl-C raises it at once (a checkpoint being written is left as it was).
        """
        until = self.config.steps if until is None else min(until, self.config.steps)
        progress = _Progress(
            self.config.steps, self.step, self.config.progress and self.rank == 0
        )
        self._clock = (time.perf_counter(), 0)  # (started, tokens seen since)
        try:
            with _Interrupt(enabled=self.world == 1) as interrupt:
                while self.step < until:
                    if self._advance(until, progress, interrupt):
                        break
        except KeyboardInterrupt as error:  # a second Ctrl-C, or one under torchrun
            progress.close()
            if isinstance(error, TrainingInterrupted):
                raise
            raise self._interrupted() from None
        progress.close()
        if interrupt.requested:  # the checkpoint of this step is saved: --resume
            raise self._interrupted()
        return self.history

    def _advance(self, until: int, progress: _Progress, interrupt: _Interrupt) -> bool:
        """One step, with its evaluation, log line and checkpoint when due; whether
        training stops here."""
        lr = self.scheduler.get_last_lr()[0]
        loss, tokens = self.train_step()
        started, seen = self._clock[0], self._clock[1] + tokens
        self._clock = (started, seen)
        elapsed = time.perf_counter() - started
        rate = seen / max(elapsed, 1e-9)
        late = self._late(elapsed)
        metrics = {}
        if self._evaluation_due() or late:
            progress.working("evaluating")
            metrics = self._evaluation()
        self._record(loss, lr, rate, metrics)
        progress.show(self.step, loss, rate, metrics)
        stop = bool(metrics) and self.stop is not None and self.stop(metrics)
        if late and not stop:
            progress.note(f"stopping after step {self.step}: the time limit of "
                          f"{self.config.max_seconds:g} s is reached")  # fmt: skip
        stopping = stop or late or interrupt.requested
        if self._checkpoint_due(until, stopping):
            progress.working("saving the checkpoint")
            self.save(self.directory / "checkpoint.pt")
        return stopping

    def _interrupted(self) -> TrainingInterrupted:
        written = self.checkpoint is not None and self.checkpoint.is_file()
        saved = self.checkpoint if written else None
        return TrainingInterrupted(self.step, saved, self.checkpoint_step)

    def _late(self, elapsed: float) -> bool:
        """``max_seconds`` have passed (under torchrun: on any rank, so all stop)."""
        if self.config.max_seconds is None:
            return False
        late = torch.tensor([float(elapsed >= self.config.max_seconds)])
        if self.world > 1:
            dist.all_reduce(late)
        return bool(late.item() > 0)

    def _evaluation_due(self) -> bool:
        every = self.config.eval_every
        return self.step == self.config.steps or bool(every and self.step % every == 0)

    def _evaluation(self) -> dict[str, float]:
        """``evaluate`` in eval mode, leaving the random state as it was."""
        if self.evaluate is None:
            return {}
        state = torch.get_rng_state(), random.getstate()
        self.model.eval()
        with torch.no_grad():
            metrics = self.evaluate(self.model)
        self.model.train()
        torch.set_rng_state(state[0])
        random.setstate(state[1])
        return metrics

    def _record(
        self, loss: float, lr: float, rate: float, metrics: dict[str, float]
    ) -> None:
        if metrics or self.step % self.config.log_every == 0 or self.step == 1:
            self.history.append(Record(self.step, loss, lr, rate, metrics))

    def _checkpoint_due(self, until: int, stopping: bool) -> bool:
        every = self.config.checkpoint_every
        periodic = bool(every and self.step % every == 0)
        ends = self.step == until or stopping
        return self.directory is not None and (ends or periodic)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "train_config": asdict(self.config),
            "meta": self.meta,
            "history": [asdict(r) for r in self.history],
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
            "format": CHECKPOINT_FORMAT,
        }

    def save(self, path: str | Path) -> None:
        """Write :meth:`state_dict` to ``path`` (rank 0 only), atomically."""
        if self.rank != 0:
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        try:
            torch.save(self.state_dict(), temporary)
            os.replace(temporary, path)  # the old checkpoint stays whole until here
        except BaseException:  # Ctrl-C or a full disk: no half-written file left
            temporary.unlink(missing_ok=True)
            raise
        self.checkpoint, self.checkpoint_step = path, self.step

    def load(self, path: str | Path) -> None:
        """Restore weights, optimizer, scheduler, step, history and random state."""
        state = load_checkpoint(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = state["step"]
        self.history = [Record(**r) for r in state["history"]]
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        self.checkpoint, self.checkpoint_step = Path(path), self.step


# --8<-- [end:Trainer]


class CheckpointError(ValueError):
    """A file that is missing, not a checkpoint, or a checkpoint this code can't use."""


# What Trainer.save writes; a file without them is some other torch file. The format
# number changes when a checkpoint's layout does (0.1.0's checkpoints have none: 1).
CHECKPOINT_KEYS = ("model", "optimizer", "scheduler", "step", "meta", "history", "rng")
CHECKPOINT_FORMAT = 1


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :meth:`Trainer.save`, safely.

    The file is read with ``torch.load(weights_only=True)``: tensors and plain Python
    values only, so a file that would unpickle an object (and so could run code) is
    refused, not executed. Any problem raises :class:`CheckpointError` with one line
    saying what is wrong with which file.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path} is not a torch file (torch.save writes a zip)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises pickle, zip and runtime errors alike
        why = (
            "it holds pickled objects, which could run code"
            if "Weights only" in str(error)
            else (str(error).strip() or type(error).__name__).splitlines()[0][:160]
        )
        raise CheckpointError(f"{path} was not loaded: {why}") from None
    keys = state if isinstance(state, dict) else {}
    missing = [key for key in CHECKPOINT_KEYS if key not in keys]
    if missing:
        raise CheckpointError(
            f"{path} is a torch file but not a named_transformer checkpoint "
            f"(it has no {', '.join(repr(k) for k in missing)})"
        )
    if state.get("format", 1) > CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path} was written by a newer named_transformer (checkpoint format "
            f"{state['format']}; this version reads up to {CHECKPOINT_FORMAT})"
        )
    return state
