"""What runs inside the rlops KFP components: KFP artifacts and parameters in, the same executor
functions the TFX components call, results onto KFP artifact metadata.

Each KFP component (components.py) is a one-line function that KFP's executor
(`python -m kfp.dsl.executor_main`, in the rlops image) calls with `dsl.Artifact` objects; it
hands them to the function of the same name here, each component's KFP face beside it
(rlops.components.<name>.kfp): it translates and calls the component's core. This module is the
dispatcher the compiled specs name. Artifacts are read and written by `uri`
(gs://... on Vertex AI, a local path under kfp.local): TensorFlow and Beam speak Cloud Storage
directly, and Dataflow workers cannot see the /gcs mount a `path` would point at.
Empty parameter values ("", 0) mean "not given", as KFP parameters cannot be None-valued.
Integer parameters are cast: kfp 2.5 compiles an int constant for a loaded spec's int input as
a number (10.0), and backends may hand it over as such.
"""

from __future__ import annotations

from rlops.quiet import entry_point_setup

# Imported first thing in the KFP container's process (components.py bodies): Keras mode and
# quiet start-up before TensorFlow / TFX load (the image sets TF_USE_LEGACY_KERAS too). The faces
# below import TensorFlow, TFX and Beam only inside their functions.
entry_point_setup()

from rlops.components.common.kfp_io import given
from rlops.components.evaluator.kfp import evaluator
from rlops.components.experience_gen.kfp import experience_gen, run_day
from rlops.components.pusher.kfp import SERVING_IMAGE, latest_published, pusher
from rlops.components.trainer.kfp import trainer

# What the specs call (components.py), and what tests and the pipelines read here.
__all__ = ["experience_gen", "trainer", "evaluator", "pusher", "latest_published", "given", "run_day", "SERVING_IMAGE"]
