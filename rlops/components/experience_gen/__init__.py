"""ExperienceGen: logged or simulated RL experience -> validated, split TFRecords (TFX Examples).

    from rlops.components.experience_gen import (ExperienceGenConfig, FileSource, BanditColumns,
                                                 SpecConfig, run_experience_gen)
    config = ExperienceGenConfig(source=FileSource("gs://logs/*.csv", format="csv"),
                                 bandit_columns=BanditColumns(context_prefix="x_"),
                                 action_spec=SpecConfig.discrete(10))
    result = run_experience_gen(config, examples_uri, quarantine_uri, ["--runner=DirectRunner"])

The TFX component (`ExperienceGen`), the KFP v2 component (rlops.components.kfp, through
`kfp.run_for_kfp`) and the CLI (`python -m rlops.components.experience_gen`) call the
same `run_experience_gen`. `ExperienceGen` and the core are imported lazily: TFX, Beam and
TensorFlow are slow to import, and reading the config (or checking cloud credentials) needs none.
"""

from rlops.components.experience_gen.config import (
    BanditColumns,
    BigQuerySource,
    ExperienceGenConfig,
    FileSource,
    SimulationSource,
    SlateColumns,
    SpecConfig,
    Split,
    SplitConfig,
    TrajectoryColumns,
)

__all__ = [
    "BanditColumns",
    "BigQuerySource",
    "ExperienceGenConfig",
    "FileSource",
    "SimulationSource",
    "SlateColumns",
    "SpecConfig",
    "Split",
    "SplitConfig",
    "TrajectoryColumns",
    "ExperienceGenError",
    "IngestResult",
    "read_quarantine",
    "run_experience_gen",
    "ExperienceGen",
    "ExperienceQuarantine",
]


_CORE = ("ExperienceGenError", "IngestResult", "read_quarantine", "run_experience_gen")


def __getattr__(name: str):
    if name in ("ExperienceGen", "ExperienceQuarantine"):
        from rlops.components.experience_gen import component

        return getattr(component, name)
    if name in _CORE:
        from rlops.components.experience_gen import core

        return getattr(core, name)
    raise AttributeError(name)
