"""The components' artifact (channel) and parameter keys, TFX-style (tfx.types.standard_component_specs
names them the same way): one spelling for the component specs, the TFX executors, the KFP entry
point and the pipelines that wire outputs to inputs (`trainer.outputs[MODEL_KEY]`)."""

from __future__ import annotations

# Artifacts.
EXAMPLES_KEY = "examples"  # Examples: ExperienceGen's output; Trainer, Evaluator and Pusher input
QUARANTINE_KEY = "quarantine"  # ExperienceQuarantine: the records ExperienceGen set aside
POLICY_KEY = "policy"  # Model: the policy ExperienceGen collects with (simulation)
MODEL_KEY = "model"  # Model: the Trainer's output
MODEL_RUN_KEY = "model_run"  # ModelRun: the Trainer's logs and metrics
BASE_MODEL_KEY = "base_model"  # Model: what the Trainer warm-starts from
BASELINE_MODEL_KEY = "baseline_model"  # Model: what the Evaluator compares against
EVALUATION_KEY = "evaluation"  # ModelEvaluation: the Evaluator's metrics and plots
BLESSING_KEY = "blessing"  # ModelBlessing: the Evaluator's verdict
METRICS_KEY = "metrics"  # VertexMetrics: the scalar estimates the Vertex AI console shows
MODEL_BLESSING_KEY = "model_blessing"  # the Pusher's name for the blessing input (TFX Pusher's)
PUSHED_MODEL_KEY = "pushed_model"  # PushedModel: the Pusher's output

# Execution parameters.
CONFIG_KEY = "config"
DATA_PATTERN_KEY = "data_pattern"
DATA_DATE_KEY = "data_date"
NUM_RECORDS_KEY = "num_records"
INPUT_FINGERPRINT_KEY = "input_fingerprint"
TRAIN_STEPS_KEY = "train_steps"
TOTAL_ENV_STEPS_KEY = "total_env_steps"
NUM_ACTIONS_KEY = "num_actions"
PUSH_DESTINATION_KEY = "push_destination"
KEEP_LAST_KEY = "keep_last"
VERIFY_ENV_ID_KEY = "verify_env_id"
VERTEX_UPLOAD_KEY = "vertex_upload"
LITERT_ALLOW_FLEX_KEY = "litert_allow_flex"
