"""The KFP sample pipeline's nightly loop on (emulated) Vertex AI, like the TFX path's three nights
in test_vertex_emulator.py: LatestPublished resolves the newest version rlops published (its
rlops_version.json marker) into the Trainer's warm start and the Evaluator's baseline.

Night 1 finds nothing published (trains from scratch, compared with the logging policy, pushed);
night 2 warm-starts from and is compared with night 1's pushed model; night 3 trains an
untrained candidate (learning rate 0, warm_start=False), compared with the latest published
model and not pushed. Each night simulates new data (another seed).

Before the resolver the sample wired no base_model / baseline_model at all (its DAG was exactly
experience-gen, trainer, evaluator, condition-1), so every night trained from scratch and was
compared with the logging policy, never with the served model.
"""

import os

import pytest

from rlops.testing.vertex_emulator import VertexEmulator

BUCKET = "gs://rlops-emulated"
RECORDS = 1500  # ~150 eval records: a greedy policy's ESS under uniform logging is ~15, hence min_ess=10


def configs(seed: int, learning_rate: float = 1e-3) -> dict:
    from rlops.components.evaluator.config import EvaluatorConfig
    from rlops.components.experience_gen.config import ExperienceGenConfig, SimulationSource, SpecConfig
    from rlops.components.trainer.config import TrainerConfig

    gen = ExperienceGenConfig(
        source=SimulationSource(env="digits", num_records=20_000, seed=seed), action_spec=SpecConfig.discrete(10)
    )
    return {
        "experience_gen_config": gen.to_json(),
        "trainer_config": TrainerConfig(
            agent="neural_epsilon_greedy",
            num_actions=10,
            train_steps=200,
            steps_per_run=100,
            learning_rate=learning_rate,
        ).to_json(),
        "evaluator_config": EvaluatorConfig(kind="bandit", num_bootstrap=100, min_ess=10).to_json(),
    }


def meta(run, task, key):
    artifact = run.artifact(task, key)
    return artifact["metadata"] if artifact else None


@pytest.fixture(scope="module")
def kfp_nights(tmp_path_factory):
    import yaml
    from kfp import compiler

    from rlops.components.kfp.sample_pipeline import build

    path = tmp_path_factory.mktemp("kfp") / "sample.yaml"
    compiler.Compiler().compile(build(), str(path))
    spec = yaml.safe_load(path.read_text())
    emulator = VertexEmulator(str(tmp_path_factory.mktemp("vertex")))
    runs = []
    for night, (date, extra) in enumerate(
        [("2026-11-21", {}), ("2026-11-22", {}), ("2026-11-23", {"warm_start": False})], start=1
    ):
        params = {
            **configs(seed=4 + night, learning_rate=0.0 if extra else 1e-3),
            **extra,
            "push_destination": f"{BUCKET}/kfp/serving",
            "num_records": RECORDS,
        }
        run = emulator.run(spec, params, pipeline_root=f"{BUCKET}/kfp/root", schedule_time=f"{date}T02:00:00Z")
        assert run.state == "SUCCEEDED", (night, {n: t.error for n, t in run.tasks.items() if t.error})
        runs.append(run)
    if emulator.warm_log_path:  # every step forked from the warm interpreter (unless RLOPS_EMULATOR_WARM=0)
        with open(emulator.warm_log_path) as f:
            steps = f.read().splitlines()
        assert len(steps) >= 3 * 4 and not [s for s in steps if " warm: " not in s], steps
    return emulator, runs


def versions(emulator):
    serving = emulator.local_path(f"{BUCKET}/kfp/serving")
    return sorted(int(n) for n in os.listdir(serving) if n.isdigit())


@pytest.mark.slow
def test_night_one_finds_nothing_published_and_trains_from_scratch(kfp_nights):
    emulator, (first, _, _) = kfp_nights
    assert meta(first, "latest-published", "base_model")["resolved"] == 0
    assert meta(first, "latest-published", "baseline_model")["resolved"] == 0
    assert meta(first, "trainer", "model")["warm_started_from"] == ""
    blessing = meta(first, "evaluator", "blessing")
    assert "baseline_model" not in blessing and blessing["blessed"] == 1  # beats the uniform logging policy
    pushed = meta(first, "pusher", "pushed_model")
    assert pushed["pushed"] == 1 and versions(emulator)[0] == pushed["pushed_version"]


@pytest.mark.slow
def test_night_two_warm_starts_from_and_is_compared_with_night_ones_pushed_model(kfp_nights):
    emulator, (first, second, _) = kfp_nights
    night1 = first.artifact("trainer", "model")
    for key in ("base_model", "baseline_model"):
        resolved = second.artifact("latest-published", key)
        assert resolved["uri"] == night1["uri"]
        assert resolved["metadata"]["pushed_version"] == meta(first, "pusher", "pushed_model")["pushed_version"]
        assert resolved["metadata"]["model_id"] == night1["name"]
    assert meta(second, "trainer", "model")["warm_started_from"].startswith(night1["uri"])
    blessing = meta(second, "evaluator", "blessing")
    assert blessing["baseline_model"] == night1["uri"] and blessing["baseline_model_id"] == night1["name"]
    assert meta(second, "experience-gen", "examples")["records_read"] == RECORDS
    assert len(versions(emulator)) == 1 + int(blessing["blessed"])


@pytest.mark.slow
def test_night_three_worse_candidate_is_compared_with_the_latest_published_and_not_pushed(kfp_nights):
    emulator, (first, second, third) = kfp_nights
    latest = second if meta(second, "evaluator", "blessing")["blessed"] else first
    baseline = latest.artifact("trainer", "model")
    assert meta(third, "latest-published", "base_model")["resolved"] == 0  # warm_start=False
    assert third.artifact("latest-published", "baseline_model")["uri"] == baseline["uri"]
    assert meta(third, "trainer", "model")["warm_started_from"] == ""
    blessing = meta(third, "evaluator", "blessing")
    assert blessing["baseline_model"] == baseline["uri"] and blessing["blessed"] == 0
    assert third.task("evaluator").output_parameters["blessed"] is False
    ran_pusher = [any(name.split("/")[-1] == "pusher" for name in run.tasks) for run in (first, third)]
    assert ran_pusher == [True, False]  # the `blessed` condition skipped it
    assert versions(emulator)[-1] == meta(latest, "pusher", "pushed_model")["pushed_version"]


def test_latest_published_reads_the_newest_rlops_marker(tmp_path):
    """Fast: only rlops-written versions count, the newest wins, a marker without lineage is refused."""
    import json

    from kfp.dsl import Model

    from rlops.components.kfp import entrypoint

    serving = tmp_path / "serving"
    for number, run in ((1, "/runs/a"), (3, "/runs/b")):
        (serving / str(number)).mkdir(parents=True)
        (serving / str(number) / "saved_model.pb").write_bytes(b"x")
        (serving / str(number) / "rlops_version.json").write_text(
            json.dumps(
                {
                    "format": 1,
                    "version": number,
                    "lineage": {"training_run": run, "evaluation": {"current_model_id": f"m{number}"}},
                }
            )
        )
    (serving / "7").mkdir()  # not rlops': no marker
    (serving / "7" / "saved_model.pb").write_bytes(b"x")
    base, baseline = Model(uri=str(tmp_path / "b")), Model(uri=str(tmp_path / "c"))
    entrypoint.latest_published(str(serving), base, baseline)
    assert (base.uri, baseline.uri, base.metadata["pushed_version"], baseline.metadata["model_id"]) == (
        "/runs/b",
        "/runs/b",
        3,
        "m3",
    )
    assert entrypoint.given(base) is base
    empty = Model(uri=str(tmp_path / "e"))
    entrypoint.latest_published(str(tmp_path / "nothing"), empty, Model(uri=str(tmp_path / "f")), warm_start=False)
    assert entrypoint.given(empty) is None and entrypoint.given(None) is None
    (serving / "3" / "rlops_version.json").write_text(json.dumps({"format": 1, "version": 3, "lineage": {}}))
    with pytest.raises(ValueError, match="^push_destination: version 3 .* lineage.training_run"):
        entrypoint.latest_published(str(serving), base, baseline)
