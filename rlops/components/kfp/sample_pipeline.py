"""A pure-KFP v2 pipeline built only from the four rlops component specs, wired by artifact:

    latest_published --base_model--> trainer, --baseline_model--> evaluator   (none on night 1)
    experience_gen --examples--> trainer --model--> evaluator --blessing--> (if blessed) pusher
          \\---------------------examples------------/---------examples----------/

Each night warm-starts from, and is compared against, the newest version rlops published under
push_destination (as the TFX pipeline's latest-blessed-model resolver does); warm_start=False
trains from scratch but still compares against it.

    python -m rlops.components.kfp.sample_pipeline bandit_kfp.yaml [--image IMG] [--gpu NVIDIA_TESLA_T4:1] [--notify]

--notify wraps the steps in a dsl.ExitHandler whose exit task (`notify_on_failure`) runs however
the steps end and, unless they succeeded, POSTs a JSON note (job, failed task, error) to the
`notify_url` pipeline parameter -- a Slack / Google Chat / Cloud Run webhook. (Vertex AI's own
email notification is Google Cloud Pipeline Components' VertexNotificationEmailOp in the same
place; rlops does not depend on that package.)

The YAML runs on Vertex AI Pipelines (`rlops submit bandit_kfp.yaml ...`) or any KFP v2 backend.
It is a template for your own DAGs: the components take the same JSON configs as the TFX ones.
Its parameters default to the bandit pipeline's configs; another pipeline's, e.g. ranking's
(slate logs, the ranking Trainer, slate estimators, serving_ranked's page checks), are
`pipeline_parameters(load_config("ranking"))` (rlops.pipelines.config) at submit time.
(No `from __future__ import annotations`: KFP reads the pipeline signature's types at definition.)
"""

import argparse
from typing import Optional

from kfp import compiler, dsl

from rlops.components.kfp import DEFAULT_IMAGE, load


def default_configs(num_actions: int = 10) -> dict[str, str]:
    """The bandit pipeline's defaults as the components' JSON configs."""
    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.experience_gen.config import ExperienceGenConfig, SimulationSource, SpecConfig
    from rlops.components.trainer.config import TrainerConfig

    return {
        "experience_gen": ExperienceGenConfig(
            source=SimulationSource(env="digits", num_records=20_000), action_spec=SpecConfig.discrete(num_actions)
        ).to_json(),
        "trainer": TrainerConfig(agent="neural_epsilon_greedy", num_actions=num_actions).to_json(),
        "evaluator": EvaluatorConfig(kind="bandit").to_json(),
    }


def pipeline_parameters(config) -> dict[str, str]:
    """A pipeline config's (rlops.pipelines.config.PipelineConfig of a pipeline with ExperienceGen:
    bandit, ranking) component configs as this pipeline's config parameters."""
    return {
        "experience_gen_config": config.experience_gen.to_json(),
        "trainer_config": config.trainer.to_json(),
        "evaluator_config": config.evaluator.to_json(),
    }


def notify_on_failure(status: dsl.PipelineTaskFinalStatus, notify_url: str = "") -> str:
    """Exit task: unless the run succeeded, POST {text, job, task, state, error} as JSON to
    notify_url (a chat / HTTP webhook). Returns the run's final state."""
    import json
    import urllib.request

    if status.state != "SUCCEEDED" and notify_url:
        note = {
            "text": f"rlops run {status.pipeline_job_resource_name} {status.state}: {status.error_message}",
            "job": status.pipeline_job_resource_name,
            "task": status.pipeline_task_name,
            "state": status.state,
            "error": status.error_message,
        }
        request = urllib.request.Request(
            notify_url, data=json.dumps(note).encode(), method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            print(f"notified {notify_url}: HTTP {response.status}")
    return status.state


def build(image: Optional[str] = None, trainer_gpu: Optional[str] = None, num_actions: int = 10, notify: bool = False):
    """The pipeline function. trainer_gpu: 'TYPE:COUNT' (e.g. NVIDIA_TESLA_T4:1) for the Trainer;
    notify: add the exit handler that reports a failed run to the `notify_url` parameter."""
    experience_gen, trainer, evaluator, pusher, latest_published = (
        load(name, image) for name in ("experience_gen", "trainer", "evaluator", "pusher", "latest_published")
    )
    configs = default_configs(num_actions)

    def steps(
        push_destination,
        experience_gen_config,
        trainer_config,
        evaluator_config,
        data_date,
        num_records,
        train_steps,
        warm_start,
    ):
        latest = latest_published(push_destination=push_destination, warm_start=warm_start)
        latest.set_caching_options(False)  # the serving directory changes under unchanged inputs
        latest.set_cpu_limit("1").set_memory_limit("2G")
        # The run date travels as inputs (data_date, else the day before the job's schedule time),
        # never as the container's clock: cache keys and backfills see the day they ingest.
        gen = experience_gen(
            config=experience_gen_config,
            data_date=data_date,
            num_records=num_records,
            run_time=dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER,
        )
        gen.set_caching_options(False)  # new data arrives under unchanged inputs
        gen.set_cpu_limit("4").set_memory_limit("16G")
        train = trainer(
            config=trainer_config,
            examples=gen.outputs["examples"],
            train_steps=train_steps,
            base_model=latest.outputs["base_model"],
        )
        train.set_cpu_limit("8").set_memory_limit("32G")
        if trainer_gpu:
            gpu_type, _, count = trainer_gpu.partition(":")
            train.set_accelerator_type(gpu_type).set_accelerator_limit(int(count or 1))
        evaluate = evaluator(
            config=evaluator_config,
            model=train.outputs["model"],
            examples=gen.outputs["examples"],
            baseline_model=latest.outputs["baseline_model"],
            num_actions=num_actions,
        )
        evaluate.set_cpu_limit("4").set_memory_limit("16G")
        with dsl.If(evaluate.outputs["blessed"] == True, name="blessed"):  # noqa: E712 (a KFP condition)
            push = pusher(
                model=train.outputs["model"],
                blessing=evaluate.outputs["blessing"],
                examples=gen.outputs["examples"],
                push_destination=push_destination,
            )
            push.set_caching_options(False)
            push.set_cpu_limit("2").set_memory_limit("8G")

    if not notify:

        @dsl.pipeline(name="rlops-bandit-kfp", description="rlops bandit retraining from KFP component specs")
        def bandit_pipeline(
            push_destination: str,
            experience_gen_config: str = configs["experience_gen"],
            trainer_config: str = configs["trainer"],
            evaluator_config: str = configs["evaluator"],
            data_date: str = "",
            num_records: int = 0,
            train_steps: int = 0,
            warm_start: bool = True,
        ):
            steps(
                push_destination,
                experience_gen_config,
                trainer_config,
                evaluator_config,
                data_date,
                num_records,
                train_steps,
                warm_start,
            )

        return bandit_pipeline

    exit_task = dsl.component(notify_on_failure, base_image=image or DEFAULT_IMAGE, install_kfp_package=False)

    @dsl.pipeline(name="rlops-bandit-kfp", description="rlops bandit retraining from KFP component specs")
    def bandit_pipeline_notifying(
        push_destination: str,
        notify_url: str = "",
        experience_gen_config: str = configs["experience_gen"],
        trainer_config: str = configs["trainer"],
        evaluator_config: str = configs["evaluator"],
        data_date: str = "",
        num_records: int = 0,
        train_steps: int = 0,
        warm_start: bool = True,
    ):
        notify_task = exit_task(notify_url=notify_url)
        notify_task.set_caching_options(False)
        with dsl.ExitHandler(notify_task, name="retrain"):
            steps(
                push_destination,
                experience_gen_config,
                trainer_config,
                evaluator_config,
                data_date,
                num_records,
                train_steps,
                warm_start,
            )

    return bandit_pipeline_notifying


def compile_sample(
    path: str, image: Optional[str] = None, trainer_gpu: Optional[str] = None, notify: bool = False
) -> str:
    compiler.Compiler().compile(build(image, trainer_gpu, notify=notify), path)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output")
    parser.add_argument("--image")
    parser.add_argument("--gpu", help="Trainer accelerator TYPE:COUNT")
    parser.add_argument("--notify", action="store_true", help="exit handler: POST failures to notify_url")
    args = parser.parse_args()
    print(compile_sample(args.output, args.image, args.gpu, args.notify))
