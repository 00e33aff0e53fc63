"""ExperienceGen: logged or simulated RL experience -> validated, split TFRecords (TFX Examples).

    from rlops.components.experience_gen import (ExperienceGenConfig, FileSource, BanditColumns,
                                                 SpecConfig, run_experience_gen)
    config = ExperienceGenConfig(source=FileSource("gs://logs/*.csv", format="csv"),
                                 bandit_columns=BanditColumns(context_prefix="x_"),
                                 action_spec=SpecConfig.discrete(10))
    result = run_experience_gen(config, examples_uri, quarantine_uri, ["--runner=DirectRunner"])

The TFX component (`ExperienceGen`), the KFP v2 component (rlops.components.kfp, through
`kfp_component.run_for_kfp`) and the CLI (`python -m rlops.components.experience_gen`) call the
same `run_experience_gen`. `ExperienceGen` is imported lazily: TFX is slow to import.
"""
from rlops.components.experience_gen.config import (BanditColumns, BigQuerySource, ExperienceGenConfig, FileSource,
                                                    SimulationSource, SpecConfig, Split, SplitConfig,
                                                    TrajectoryColumns)
from rlops.components.experience_gen.core import (ExperienceGenError, IngestResult, read_quarantine,
                                                  run_experience_gen)

__all__ = ["BanditColumns", "BigQuerySource", "ExperienceGenConfig", "FileSource", "SimulationSource", "SpecConfig",
           "Split", "SplitConfig", "TrajectoryColumns", "ExperienceGenError", "IngestResult", "read_quarantine",
           "run_experience_gen", "ExperienceGen", "ExperienceQuarantine"]


def __getattr__(name: str):
    if name in ("ExperienceGen", "ExperienceQuarantine"):
        from rlops.components.experience_gen import component
        return getattr(component, name)
    raise AttributeError(name)
