"""`rlops run ranking` end to end (TFX LocalDagRunner), as docs/slates.md runs it: simulated slate
logs -> ExperienceGen ->
Trainer (RankingAgent) -> Evaluator (slate estimators) -> Pusher (serving_ranked's pages verified in
two fresh processes). One small run; the tests read what it left: the pushed SavedModel answers
serving_ranked in a fresh process, its pages beat the logging policy's by the slate generator's
exact truth, the Evaluator's numbers are the served pages' by hand, `rlops evaluate --policy` gives
the same, a blessed baseline is compared paired. Bad ranking configs are one line, exit 2."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from helpers import run_fresh_python

from rlops.heads.slate.probabilities import Greedy, PlackettLuce
from rlops.pipelines import cli
from rlops.pipelines.config import load_config


def doc_overrides() -> list[str]:
    """docs/slates.md's `rlops run ranking` line, as --set overrides (the run below is that line)."""
    from test_docs import block, command_lines

    [line] = command_lines(block(".venv/bin/rlops run ranking").text)
    assert line[:3] == [".venv/bin/rlops", "run", "ranking"], line
    return [line[i + 1] for i, word in enumerate(line) if word == "--set"]


SMALL_RANKING = [*doc_overrides(), "evaluator.num_bootstrap=200"]  # a smaller bootstrap than the page's

SERVE_PAGES = """
import json, sys, numpy as np, tensorflow as tf
assert "rlops" not in sys.modules
policy = tf.saved_model.load(sys.argv[1])
serve = policy.signatures["serving_ranked"]
spec = serve.structured_input_signature[1]
n = 5
feeds = {k: tf.constant(["nobody-knows-me"] * n) if s.dtype == tf.string else tf.zeros([n], s.dtype)
         for k, s in spec.items()}
feeds["num_actions"] = tf.constant([10, 10, 10, 4, 3], tf.int64)
out = serve(**feeds)
print(json.dumps({k: out[k].numpy().tolist() for k in ("slate", "propensity_item_position", "propensity_cascade")}))
"""


@pytest.fixture(scope="module")
def ranking_run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ranking"))
    summary_path = os.path.join(root, "summary.json")
    argv = ["run", "ranking", *(a for s in SMALL_RANKING for a in ("--set", s))]
    assert cli.main([*argv, "--set", f"root={root}", "--summary-json", summary_path]) == 0
    config = load_config("ranking", overrides=[*SMALL_RANKING, f"root={root}"])
    with open(summary_path) as f:
        summary = json.load(f)
    examples = glob.glob(os.path.join(config.pipeline_root, "ExperienceGen", "examples", "*"))[0]
    model = glob.glob(os.path.join(config.pipeline_root, "Trainer", "model", "*"))[0]
    return config, summary, examples, model


def pushed_version(config) -> str:
    versions = sorted(v for v in os.listdir(config.serving_dir) if v.isdigit())
    return os.path.join(config.serving_dir, versions[-1])


@pytest.mark.slow
def test_rlops_run_ranking_ends_in_a_verified_push_serving_pages(ranking_run):
    config, summary, _, _ = ranking_run
    assert set(summary["components"].values()) == {"COMPLETE"}, summary["components"]
    assert summary["records_written_eval"] > 0 and summary["records_quarantined"] == 0
    assert summary["blessed"] and summary["pushed"], summary["blessing_reason"]
    assert "snrips" in summary["blessing_reason"] and "lower 95% bound" in summary["blessing_reason"]
    with open(os.path.join(pushed_version(config), "policy_specs.json")) as f:
        assert json.load(f)["decision_kind"] == "slate"  # the kind travelled: Examples -> Trainer -> push
    # a server's view: TensorFlow alone, a context no vocabulary holds, fewer candidates on some rows
    pages = run_fresh_python(SERVE_PAGES, pushed_version(config))
    slates = np.asarray(pages["slate"])
    assert slates.shape == (5, 3) and all(len(set(s)) == 3 for s in slates.tolist())
    assert (slates[3] < 4).all() and (slates[4] < 3).all()  # only the candidates in use
    p = np.asarray(pages["propensity_item_position"])
    cascade = np.asarray(pages["propensity_cascade"])
    assert ((p > 0) & (p <= 1)).all() and (np.diff(cascade, axis=1) <= 0).all() and (cascade > 0).all()


@pytest.mark.slow
def test_the_pushed_pages_beat_the_logging_policy_by_the_exact_truth(ranking_run):
    from rlops.components.experience_gen.slate_simulation import slate_world

    config = ranking_run[0]
    world = slate_world(config.experience_gen)  # the simulation's own world
    pop = world.population
    feeds = {
        c: tf.constant(pop[c].astype(np.bytes_ if pop[c].dtype.kind in "OU" else np.float32))
        for c in world.user_columns + world.float_columns
    }
    feeds["num_actions"] = tf.fill([len(world.user_weights)], tf.constant(world.num_items, tf.int64))
    policy = tf.saved_model.load(pushed_version(config))
    scores = policy.signatures["serving_ranked"](**feeds)["scores"].numpy().astype(np.float64)
    logging = world.true_value(world.logging_policy, world.logging_scores).value
    best = world.true_value(Greedy(), np.log(world.relevance)).value
    served = world.true_value(PlackettLuce(config.trainer.ranking.temperature), scores).value
    greedy = world.true_value(Greedy(), scores).value
    assert served > logging and greedy > logging + 0.5 * (best - logging), (served, greedy, logging, best)


def reference_estimates(examples: str, model_uri: str, num_items: int, num_slots: int) -> dict[str, float]:
    """iips and snrips of the served Plackett-Luce page by hand: the model's scores of each eval
    page's context, the numpy module's exact probabilities, OBP's formulas."""
    from rlops.components.common.model import serving_dir
    from rlops.components.common.slates import read_slate_logs

    logs = read_slate_logs(examples, "eval")
    serve = tf.saved_model.load(serving_dir(model_uri)).signatures["serving_ranked"]
    spec = serve.structured_input_signature[1]
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(sorted(glob.glob(f"{examples}/Split-eval/*")), "GZIP")]
    feeds = tf.io.parse_example(serialized, {k: tf.io.FixedLenFeature([], s.dtype) for k, s in spec.items()})
    scores = serve(**feeds)["scores"].numpy().astype(np.float64)
    pl = PlackettLuce(0.5)
    rows, slots = np.arange(len(logs))[:, None], np.arange(num_slots)[None]
    marginal = pl.marginals(scores, num_slots)[rows, logs.slates, slots]
    w = pl.prefix_probs(scores, logs.slates) / logs.propensity_cascade
    return {
        "iips": (marginal / logs.propensity * logs.rewards).sum(1).mean(),
        "snrips": ((w * logs.rewards).sum(0) / w.sum(0)).sum(),
    }


@pytest.mark.slow
def test_the_evaluator_estimates_the_served_pages_and_rlops_evaluate_agrees(ranking_run, tmp_path, capsys):
    config, _, examples, model = ranking_run
    metrics = json.loads(
        open(glob.glob(os.path.join(config.pipeline_root, "Evaluator", "evaluation", "*", "metrics.json"))[0]).read()
    )
    reference = reference_estimates(examples, model, 10, 3)
    for name, value in reference.items():
        assert metrics["candidate"][name]["value"] == pytest.approx(value, rel=1e-6), name
    assert metrics["baseline"] == "logging_policy" and metrics["trust"]["trusted"]
    assert set(metrics["candidate_greedy"]) == set(metrics["candidate"])  # the greedy page beside

    out = tmp_path / "result.json"
    argv = ["evaluate", "--examples", examples, "--policy", model, "--num-bootstrap", "200", "--json", str(out)]
    assert cli.main(argv) == 0  # the pipeline's evaluator settings (SMALL_RANKING)
    assert "vs logging" in capsys.readouterr().out
    result = json.loads(out.read_text())
    for name in ("iips", "snrips", "cascade_dr"):
        assert result["estimates"][name]["value"] == pytest.approx(metrics["candidate"][name]["value"], rel=1e-9)
    assert result["improvement_over_logging"]["snrips"] == metrics["improvement"]["snrips"]


@pytest.mark.slow
def test_a_blessed_baseline_is_compared_paired_and_untrusted_is_null(ranking_run, tmp_path):
    from rlops.components.evaluator.core import run_evaluator
    from rlops.components.evaluator.slate_config import SlateEvaluatorConfig

    _, _, examples, model = ranking_run
    paired = run_evaluator(
        SlateEvaluatorConfig(num_bootstrap=50).to_json(),
        model,
        str(tmp_path / "e"),
        str(tmp_path / "b"),
        examples,
        model,
    )
    assert paired.metrics["baseline"] == model and not paired.blessed
    assert paired.metrics["improvement"]["snrips"]["value"] == 0.0  # the same pages, paired: exactly no gain
    strict = SlateEvaluatorConfig(num_bootstrap=50, min_ess=1e9)
    untrusted = run_evaluator(strict.to_json(), model, str(tmp_path / "e2"), str(tmp_path / "b2"), examples)
    assert not untrusted.blessed and "effective sample size" in untrusted.reason
    written = json.loads((tmp_path / "e2" / "metrics.json").read_text(), parse_constant=pytest.fail)  # no NaN
    assert written["improvement"]["snrips"]["value"] is None and written["trust"]["trusted"] is False


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["experience_gen.slate_length=11"], "experience_gen.slate_length: 11 slots, but experience_gen.action_spec"),
        (["experience_gen.record_kind=bandit"], "'bandit' records train a bandit policy, not a ranking one"),
        (["evaluator.estimator=dr"], "evaluator.estimator: unknown slate estimator 'dr'"),
        (["trainer.agent=lin_ucb"], "trainer.agent: 'lin_ucb' is not a ranking agent"),
        (
            ["experience_gen.source.env_kwargs.click_modle=pbm"],
            "env_kwargs.click_modle: unknown key; closest: click_model",
        ),
    ],
)
def test_a_bad_ranking_config_is_one_line(overrides, message, capsys, tmp_path):
    argv = ["config", "ranking", "--set", f"root={tmp_path}", *(a for o in overrides for a in ("--set", o))]
    assert cli.main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert message in line, line


def test_single_item_logs_under_the_ranking_pipeline_are_one_line(tmp_path, capsys):
    """A ranking config pointed at a bandit log (one item per row, no page lists): exit 2 at the
    first step, naming the slate column the log lacks."""
    logs = tmp_path / "decisions.csv"
    logs.write_text("user,action,reward,propensity\nu1,3,1,0.1\nu2,4,0,0.1\n")
    source = f"experience_gen.source={{kind: file, pattern: '{logs}', format: csv}}"
    argv = ["run", "ranking", "--set", f"root={tmp_path}/root", "--set", source]
    assert cli.main(argv) == 2
    [line] = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rlops:")]
    assert "experience_gen.slate_columns.slate_id: column 'slate_id' is not in" in line, line
