"""The bandit pipeline on logs with hashed-string features: ExperienceGen -> Trainer
(NeuralEpsilonGreedy, LinUCB) -> Evaluator -> Pusher; then a fresh process WITHOUT rlops serves
the pushed SavedModel through `serving_default` from a TF-Serving REST `instances` body."""

import glob
import json
import os

import numpy as np
import pytest
from feature_logs import FEATURES, NUM_ACTIONS, make_logs, pipeline_config, write_csv
from helpers import run_fresh_python

from rlops.pipelines.local import run_local

pytestmark = pytest.mark.slow

# What TF Serving's REST API does with a row-format body: for each named input of the
# signature, gather that key of every instance into one batched tensor of the input's dtype
# (a missing key is an error naming the input); outputs come back as one dict per instance.
SERVE_REST = r"""
import importlib.abc, json, sys

class NoRlops(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "rlops" or name.startswith("rlops."):
            raise ImportError("rlops is not installed on the server")

sys.meta_path.insert(0, NoRlops())
import tensorflow as tf

model = tf.saved_model.load(sys.argv[1])
fn = model.signatures["serving_default"]
specs = fn.structured_input_signature[1]
meta = {k: v.numpy().decode() if v.dtype == tf.string else float(v.numpy())
        for k, v in model.signatures["get_metadata"]().items()}


def answer(body):
    instances = body["instances"]
    feeds = {}
    for name, spec in specs.items():
        missing = [i for i, inst in enumerate(instances) if name not in inst]
        if missing:
            return {"error": f"instance {missing[0]}: does not have named input: {name}"}
        feeds[name] = tf.constant([inst[name] for inst in instances], spec.dtype)
    out = {k: v.numpy().tolist() for k, v in fn(**feeds).items()}
    return {"predictions": [{k: out[k][i] for k in out} for i in range(len(instances))]}


responses = [answer(body) for body in json.loads(open(sys.argv[2]).read())]
print(json.dumps({"responses": responses, "metadata": meta, "inputs": sorted(specs),
                  "rlops_loaded": any(m == "rlops" or m.startswith("rlops.") for m in sys.modules)}))
"""


def serve_rest(saved_model_dir, requests, tmp_path):
    """One fresh server process answering each list of instances as a REST request body."""
    bodies = tmp_path / "requests.json"
    bodies.write_text(json.dumps([{"instances": instances} for instances in requests]))
    return run_fresh_python(SERVE_REST, saved_model_dir, str(bodies), cwd=tmp_path)


def quarantined_and_written(root):
    import gzip

    import tensorflow as tf

    files = glob.glob(str(root / "**" / "quarantine*.jsonl.gz"), recursive=True)
    assert files, "ExperienceGen wrote no quarantine output"
    bad = sum(len(gzip.open(f).read().splitlines()) for f in files)
    shards = glob.glob(str(root / "**" / "Split-*" / "*.gz"), recursive=True)
    written = sum(1 for s in shards for _ in tf.data.TFRecordDataset(s, compression_type="GZIP"))
    return bad, written


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("feature_pipeline")
    cols, best = make_logs(4000, seed=1)
    write_csv(d / "logs.csv", cols)
    out = {}
    for agent in ("neural_epsilon_greedy", "lin_ucb"):
        root = d / agent
        root.mkdir()
        out[agent] = run_local(pipeline_config(root, d / "logs.csv", agent)), root
    return out


def _instances(cols, n, order=None):
    order = order or FEATURES
    return [{k: (cols[k][i].item() if hasattr(cols[k][i], "item") else cols[k][i]) for k in order} for i in range(n)]


@pytest.mark.parametrize("agent", ["neural_epsilon_greedy", "lin_ucb"])
def test_pipeline_trains_evaluates_pushes_and_a_server_acts_on_raw_strings(runs, agent, tmp_path):
    run, root = runs[agent]
    assert run.components["ExperienceGen"] == "COMPLETE"
    assert quarantined_and_written(root) == (0, 4000)
    assert run.blessed and run.pushed, run.blessing_reason
    assert os.path.exists(os.path.join(run.pushed_destination, "rlops_feature_schema.json"))
    cols, best = make_logs(600, seed=7)  # fresh users' decisions
    small, _ = make_logs(50, seed=3)
    renamed = [{("user_A" if k == "user_a" else k): v for k, v in inst.items()} for inst in _instances(small, 5)]
    got = serve_rest(
        run.pushed_destination,
        [_instances(cols, 600), _instances(small, 50), _instances(small, 50, order=FEATURES[::-1]), renamed],
        tmp_path,
    )
    assert not got["rlops_loaded"] and got["inputs"] == sorted(FEATURES)
    eps = got["metadata"]["serving_epsilon"]
    assert eps == pytest.approx(0.2)
    pred = got["responses"][0]["predictions"]
    action = np.array([p["action"] for p in pred])
    greedy = np.array([p["greedy_action"] for p in pred])
    prop = np.array([p["propensity"] for p in pred])
    assert action.shape == (600,) and set(action) <= set(range(NUM_ACTIONS))
    # Propensities are the exploring policy's: 1 - eps + eps/K for the greedy action, eps/K
    # otherwise, so over all K actions they sum to 1; the greedy action is taken that often.
    k = NUM_ACTIONS
    np.testing.assert_allclose(prop, np.where(action == greedy, 1 - eps + eps / k, eps / k), rtol=1e-6)
    assert (1 - eps + eps / k) + (k - 1) * eps / k == pytest.approx(1.0)
    assert abs(np.mean(action == greedy) - (1 - eps + eps / k)) < 0.06
    # It learned from the strings: the greedy action is the user segment's best one.
    assert np.mean(greedy == best) > 0.8
    # The same instances with their keys in another order: identical greedy actions.
    same, reordered = ([p["greedy_action"] for p in r["predictions"]] for r in got["responses"][1:3])
    assert same == reordered
    # A renamed feature is refused, naming the input the model needs.
    assert "named input: user_a" in got["responses"][3]["error"]
