"""What a Trainer run reports: `TrainResult`, written into metrics.json and onto the output
artifacts' properties by both faces."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlops.components.common.keys import MODEL_KEY, MODEL_RUN_KEY

LOSS = "loss"  # the curve holds (train step, loss after that Learner call)
RETURN = "return"  # the curve holds (env steps, return of the episode that ended there)


@dataclass
class TrainResult:
    train_steps: int
    final_loss: float
    steps_per_sec: float
    wall_s: float
    warm_started_from: str | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    curve_of: str = LOSS  # what `curve` tracks: LOSS or RETURN (how the learning curve is plotted)

    def as_dict(self) -> dict[str, Any]:
        return {
            "train_steps": self.train_steps,
            "final_loss": self.final_loss,
            "steps_per_sec": round(self.steps_per_sec, 1),
            "wall_s": round(self.wall_s, 2),
            "warm_started_from": self.warm_started_from,
            **self.extra,
        }

    def properties(self) -> dict[str, dict[str, Any]]:
        """The output artifacts' properties by output key, as both faces write them (TFX custom
        properties, KFP metadata; a non-finite number, e.g. the loss when no step ran, is left
        out): the Model's train steps, final loss, warm start (or why a given base model could not
        seed it) and, for bandits, the records consumed (to check against the split); the
        ModelRun's speed and records consumed."""
        model: dict[str, Any] = {
            "train_steps": self.train_steps,
            "final_loss": self.final_loss,
            "warm_started_from": self.warm_started_from or "",
        }
        run: dict[str, Any] = {"steps_per_sec": self.steps_per_sec}
        if "train_records" in self.extra:
            model["train_records"] = run["train_records"] = int(self.extra["train_records"])
        if "records_per_sec" in self.extra:
            run["records_per_sec"] = float(self.extra["records_per_sec"])
        if self.extra.get("cold_start_reason"):
            model["cold_start_reason"] = self.extra["cold_start_reason"]
        return {MODEL_KEY: model, MODEL_RUN_KEY: run}
