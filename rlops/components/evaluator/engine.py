"""Which engine evaluates a split, decided on the one read of it the evaluation makes: the
config's engine, or by the split's size ("auto": the Beam engine past beam_threshold_records,
else in memory). The in-memory engine gets every record from that read, parsed once; the Beam
engine streams the split itself and gets only its first records (the baseline's fit check)."""

from __future__ import annotations

from dataclasses import dataclass

from rlops.components.common.feedback import LoggedFeedback
from rlops.components.evaluator.config import EvaluatorConfig
from rlops.components.evaluator.split_records import SerializedSplit, parse_feedback, read_serialized

HEAD_RECORDS = 1000  # what the Beam engine's driver checks a baseline's fit on


@dataclass(frozen=True)
class OpenSplit:
    """A split read for one evaluation: `engine` "memory" or "beam"; `records` every record
    (memory) or the first HEAD_RECORDS (beam), serialized."""

    engine: str
    records: SerializedSplit

    @property
    def empty(self) -> bool:
        return not self.records.num_records

    def feedback(self, action_minimum: int) -> LoggedFeedback:
        """The records read, parsed (load_logged_feedback's form and errors)."""
        return parse_feedback(self.records, action_minimum)


def open_split(config: EvaluatorConfig, examples_uri: str, split: str = "eval") -> OpenSplit:
    """The split read once, and the engine that evaluates it. Deciding "auto" reads at most
    beam_threshold_records + 1 records (what the in-memory engine would hold); a larger split
    keeps only its head."""
    if config.engine == "memory":
        limit = None
    elif config.engine == "beam":
        limit = HEAD_RECORDS
    else:
        limit = config.beam_threshold_records + 1
    read = read_serialized(examples_uri, split, limit)
    if config.engine == "beam" or (config.engine == "auto" and read.num_records > config.beam_threshold_records):
        return OpenSplit("beam", read.head(HEAD_RECORDS))
    return OpenSplit("memory", read)
