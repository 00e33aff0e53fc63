"""The Trainer's training loop, shared by every path that trains through the strategy-aware
Learner: Learner calls of a few train steps each, progress lines, a checkpoint at the end."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from rlops.components.trainer.result import TrainResult

log = logging.getLogger(__name__)


@dataclass
class Trained:
    """What the training loop did: train steps done in this model directory (a resumed job's
    earlier ones included), how many of them were done before this run (`resumed`), the loss after
    each Learner call, and the wall time."""

    steps: int
    resumed: int
    curve: list[tuple[int, float]]
    wall_s: float

    def result(self, warm_started_from: str | None, extra: dict[str, Any]) -> TrainResult:
        return TrainResult(
            train_steps=self.steps,
            final_loss=self.curve[-1][1] if self.curve else float("nan"),
            steps_per_sec=(self.steps - self.resumed) / max(self.wall_s, 1e-9),
            wall_s=self.wall_s,
            warm_started_from=warm_started_from,
            curve=self.curve,
            extra=extra,
        )


def train_loop(
    learner: Any,
    done: int,
    cap: int | None,
    steps_per_run: int,
    passes: bool,
    note: Callable[[], str] = lambda: "",
) -> Trained:
    """Learner calls of `steps_per_run` train steps (one tf.function each) from `done` (> 0 when a
    preempted job resumes) up to `cap`, then a checkpoint.

    `passes`: the dataset is finite (passes over a split): `Learner.run_available`, and a call
    that runs fewer steps than asked means the passes are over; `cap` None trains until then.
    Otherwise the dataset repeats (`Learner.run`) and `cap` is needed. `note()` adds to each
    progress line."""
    if cap is None and not passes:
        raise ValueError("train_loop: a repeating dataset needs a cap on train steps")
    resumed, start = done, time.perf_counter()
    curve: list[tuple[int, float]] = []
    while cap is None or done < cap:
        n = steps_per_run if cap is None else min(steps_per_run, cap - done)
        if passes:
            loss, ran = learner.run_available(iterations=n)
        else:
            loss, ran = learner.run(iterations=n), n
        if ran:
            done += ran
            curve.append((done, float(loss.loss)))
            log.info("trainer: %d steps%s, loss %.4f", done, note(), curve[-1][1])
        if ran < n:  # the passes are over
            break
    wall = time.perf_counter() - start
    learner.save_checkpoint()
    return Trained(done, resumed, curve, wall)
