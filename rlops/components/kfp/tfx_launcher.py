"""TFX's v2 container launcher (kubeflow_v2_run_executor), unchanged, plus the rlops artifact
types that carry a KFP system schema title.

The launcher imports each artifact's Python class by its schema title: TFX's own titles map to
TFX classes, any other title must itself be an import path. The Vertex AI console shows a run's
scalar metrics only for artifacts titled `system.Metrics`, which is no import path; this entry
point maps that title to rlops' VertexMetrics class, then hands over to TFX's launcher. The
compiler (rlops.pipelines.vertex) gives only steps with such an output this command.

    python -m rlops.components.kfp.tfx_launcher --executor_class_path ... --json_serialized_invocation_args ...
"""

from __future__ import annotations

SYSTEM_TITLES = {"system.Metrics": "rlops.components.evaluator.component.VertexMetrics"}
COMMAND = ["python", "-m", "rlops.components.kfp.tfx_launcher"]


def main() -> None:
    from rlops.quiet import entry_point_setup

    entry_point_setup()  # Keras mode before TFX loads (the image sets it too)
    from absl import app
    from tfx.orchestration.kubeflow.v2 import compiler_utils
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor as launcher

    compiler_utils.TITLE_TO_CLASS_PATH.update(SYSTEM_TITLES)
    app.run(launcher.main, flags_parser=launcher._parse_flags)


if __name__ == "__main__":
    main()
