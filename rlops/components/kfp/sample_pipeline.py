"""A pure-KFP v2 pipeline built only from the four rlops component specs, wired by artifact:

    experience_gen --examples--> trainer --model--> evaluator --blessing--> (if blessed) pusher
          \\---------------------examples------------/---------examples----------/

    python -m rlops.components.kfp.sample_pipeline bandit_kfp.yaml [--image IMG] [--gpu NVIDIA_TESLA_T4:1]

The YAML runs on Vertex AI Pipelines (`rlops submit bandit_kfp.yaml ...`) or any KFP v2 backend.
It is a template for your own DAGs: the components take the same JSON configs as the TFX ones.
(No `from __future__ import annotations`: KFP reads the pipeline signature's types at definition.)
"""
import argparse
from typing import Optional

from kfp import compiler, dsl

from rlops.components.kfp import load


def default_configs(num_actions: int = 10) -> dict[str, str]:
    """The bandit pipeline's defaults as the components' JSON configs."""
    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.experience_gen.config import ExperienceGenConfig, SimulationSource, SpecConfig
    from rlops.components.trainer.config import TrainerConfig
    return {"experience_gen": ExperienceGenConfig(source=SimulationSource(env="digits", num_records=20_000),
                                                  action_spec=SpecConfig.discrete(num_actions)).to_json(),
            "trainer": TrainerConfig(agent="neural_epsilon_greedy", num_actions=num_actions).to_json(),
            "evaluator": EvaluatorConfig(kind="bandit").to_json()}


def build(image: Optional[str] = None, trainer_gpu: Optional[str] = None, num_actions: int = 10):
    """The pipeline function. trainer_gpu: 'TYPE:COUNT' (e.g. NVIDIA_TESLA_T4:1) for the Trainer."""
    experience_gen, trainer, evaluator, pusher = (load(name, image) for name in
                                                  ("experience_gen", "trainer", "evaluator", "pusher"))
    configs = default_configs(num_actions)

    @dsl.pipeline(name="rlops-bandit-kfp", description="rlops bandit retraining from KFP component specs")
    def bandit_pipeline(push_destination: str, experience_gen_config: str = configs["experience_gen"],
                        trainer_config: str = configs["trainer"], evaluator_config: str = configs["evaluator"],
                        data_date: str = "", num_records: int = 0, train_steps: int = 0):
        # The run date travels as inputs (data_date, else the day before the job's schedule time),
        # never as the container's clock: cache keys and backfills see the day they ingest.
        gen = experience_gen(config=experience_gen_config, data_date=data_date, num_records=num_records,
                             run_time=dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER)
        gen.set_caching_options(False)  # new data arrives under unchanged inputs
        gen.set_cpu_limit("4").set_memory_limit("16G")
        train = trainer(config=trainer_config, examples=gen.outputs["examples"], train_steps=train_steps)
        train.set_cpu_limit("8").set_memory_limit("32G")
        if trainer_gpu:
            gpu_type, _, count = trainer_gpu.partition(":")
            train.set_accelerator_type(gpu_type).set_accelerator_limit(int(count or 1))
        evaluate = evaluator(config=evaluator_config, model=train.outputs["model"], examples=gen.outputs["examples"],
                             num_actions=num_actions)
        evaluate.set_cpu_limit("4").set_memory_limit("16G")
        with dsl.If(evaluate.outputs["blessed"] == True, name="blessed"):  # noqa: E712 (a KFP condition)
            push = pusher(model=train.outputs["model"], blessing=evaluate.outputs["blessing"],
                          examples=gen.outputs["examples"], push_destination=push_destination)
            push.set_caching_options(False)
            push.set_cpu_limit("2").set_memory_limit("8G")

    return bandit_pipeline


def compile_sample(path: str, image: Optional[str] = None, trainer_gpu: Optional[str] = None) -> str:
    compiler.Compiler().compile(build(image, trainer_gpu), path)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output")
    parser.add_argument("--image")
    parser.add_argument("--gpu", help="Trainer accelerator TYPE:COUNT")
    args = parser.parse_args()
    print(compile_sample(args.output, args.image, args.gpu))
