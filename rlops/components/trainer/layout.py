"""The files a Trainer run writes (TFX conventions where they exist):

<model>/Format-Serving/      greedy policy SavedModel (what the Pusher ships; common.model)
<model>/collect_policy/      exploring policy SavedModel (logs propensities for the next round)
<model>/train/checkpoints/   Learner checkpoints (warm start and preemption resume)
<model>/trainer_config.json  the run's TrainerConfig (a warm start checks it fits)
<model_run>/                 TensorBoard event files, metrics.json and learning_curve.png
"""

from __future__ import annotations

COLLECT_POLICY_DIR = "collect_policy"
CONFIG_FILE = "trainer_config.json"
METRICS_FILE = "metrics.json"
CURVE_FILE = "learning_curve.png"
