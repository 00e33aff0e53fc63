"""rlops: TFX / Kubeflow Pipelines components and TF2 agents for reinforcement learning.

Importing rlops changes nothing in the host process (environment, warning filters, logging).
Processes that rlops starts (the `rlops` CLI, the KFP and TFX container entry points,
`python -m rlops.components.experience_gen`) choose their Keras mode and quiet their start-up
in `rlops.quiet.entry_point_setup`; a script of your own that imports TFX and rlops' agents in
one process sets `TF_USE_LEGACY_KERAS=0` before importing TFX (see docs/getting-started.md, "Keras mode").
"""

__version__ = "0.1.0"
