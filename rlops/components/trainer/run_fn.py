"""`run_fn` for TFX's standard Trainer (GenericExecutor): the same training code as our
Trainer component, so TFX's Vertex AI training extension can run it on GPUs/TPUs:

    from tfx.extensions.google_cloud_ai_platform.trainer import component as vertex_trainer
    vertex_trainer.Trainer(module_file=None, run_fn="rlops.components.trainer.run_fn.run_fn",
                           examples=..., custom_config={"rlops_trainer": {...TrainerConfig...},
                                                        ai_platform_training_args: {...}})

`fn_args.custom_config["rlops_trainer"]` holds the TrainerConfig as a dict; the policy lands in
`fn_args.serving_model_dir` (= <model>/Format-Serving) and logs in `fn_args.model_run_dir`.
"""

from __future__ import annotations

import os

CONFIG_KEY = "rlops_trainer"


def _examples_uri(train_files: list[str]) -> str | None:
    """TFX gives split file patterns (<examples>/Split-train/*); we want <examples>."""
    if not train_files:
        return None
    split_dir = (
        os.path.dirname(train_files[0].rstrip("*").rstrip("/"))
        if train_files[0].endswith("*")
        else os.path.dirname(train_files[0])
    )
    return os.path.dirname(split_dir) if os.path.basename(split_dir).startswith("Split-") else split_dir


def run_fn(fn_args) -> None:
    from rlops.components.trainer.config import TrainerConfig
    from rlops.components.trainer.core import apply_runtime_params, run_trainer

    custom = fn_args.custom_config or {}
    if CONFIG_KEY not in custom:
        raise ValueError(f"custom_config['{CONFIG_KEY}'] is missing: put the rlops TrainerConfig (a dict) there")
    # TFX's own budget (Trainer(train_args=...)) wins, so a runtime parameter can set it: the same
    # rule as the executor's and the KFP component's.
    config = apply_runtime_params(TrainerConfig.from_dict(custom[CONFIG_KEY]), getattr(fn_args, "train_steps", None))
    model_uri = os.path.dirname(fn_args.serving_model_dir.rstrip("/"))
    run_trainer(
        config,
        model_uri,
        fn_args.model_run_dir,
        examples_uri=_examples_uri(list(fn_args.train_files or [])),
        base_model_uri=os.path.dirname(fn_args.base_model.rstrip("/")) if fn_args.base_model else None,
    )
