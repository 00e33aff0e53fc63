"""The nightly loop, closed: the product serves, logs, retrains, evaluates and pushes, night after night.

Each night, on a world with a known click model (rlops.envs.logged_feedback.LogGenerator, per-arm
item features):
1. the simulated users ask the PUSHED policy (the highest version under the pipeline's serving
   directory) for decisions through its `serving_default`, in a fresh process that imports
   TensorFlow and numpy only (benchmarks/_serve_policy.py), as a server would;
2. their clicks are drawn from the generator's click model;
3. the decisions are logged as the next night's input files: the context features, the item table,
   action, propensity and the policy version that made them (a column);
4. the pipeline runs through rlops' own entry point (`rlops run bandit --config night.yaml`):
   ingest, warm-start train, evaluate against the served baseline, push.
Night 0's logs come from the generator's logging policy (Thompson sampling), version 0.

Per night it records the served policy's exact true value (its epsilon-greedy action probabilities
over the whole finite user population, from `serving_default` and `get_metadata`), the optimum,
the logging policy's value, the Evaluator's estimate and interval for the candidate it blessed or
rejected (with that candidate's exact value), and the realized online click-through rate.

    python benchmarks/closed_loop.py [--nights 5] [--seeds 3] [--decisions 20000]   # the product's defaults
    python benchmarks/closed_loop.py --bless-on lower_bound   # the gate before 2026-12-08, in the same world
    python benchmarks/closed_loop.py --serving-epsilon 0.05 --train-share 1 --eval-share 1 --bless-on point_estimate

    python benchmarks/closed_loop.py --reference --ctr 0.05 --serving-epsilon 0.05  # the budget's reference
    python benchmarks/closed_loop.py --reference --reference-model lowrank --reference-l2 10 \
        --ctr 0.05 --serving-epsilon 0.05   # the low-rank reference (the click model's own shape)
    python benchmarks/closed_loop.py --reference --reference-model lowrank --reference-l2 10 \
        --ctr 0.05 --serving-epsilon 0.03 --reference-temperature 0.003  # explore where it nearly ties
    python benchmarks/closed_loop.py ... --serving-epsilon-by-night 0.1,0.05,0.03  # explore more early
    python benchmarks/closed_loop.py ... --num-epochs 10   # passes a night: the steps grow with the logs
    python benchmarks/closed_loop.py --reference-on-logs DIR --reference-model lowrank --reference-l2 10 \
        --ctr 0.05 --serving-epsilon 0.03   # that reference fitted on what the product logged in DIR

With no learner or gate flag, each night's config sets only what a user must (the logs' columns,
the item table, the action range) and the product's defaults do the rest: the per-arm learner
(PER_ARM_DEFAULTS), the split, the serving epsilon and the Evaluator's gate. Every night ingests
every night's logs so far (`--tonight-only`: tonight's). A flag overrides one default and is
written into the config. (Before 2026-12-08 the benchmark trained its own settings unless told:
a common tower on squared error, 600 steps of 128, hidden 64, serving epsilon 0.05, a 1:1 split;
commands in docs/benchmarks.md dated earlier ran those.)

`--reference` runs the same loop with a well-specified learner outside the product
(`reference_loop`: one logistic regression per item, or `--reference-model lowrank`, one rank-d
logistic factorization model), and every run reports `epsilon_ceiling`: the most any policy served
with that epsilon can reach. Together they say whether a shortfall is the product's or the budget's.
`--reference-on-logs DIR` fits the reference on the logs a product run kept (`--workdir DIR`):
whether those logs held what a well-specified learner needs to go further.

Prints one JSON line: per-seed, per-night lists and a summary (how far the last night's served
policy got from the logging policy's value to the optimum, OPE interval coverage over nights x
seeds, whether every logged decision carries the version pushed that night).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SERVE_SCRIPT = HERE / "_serve_policy.py"
ITEM_FEATURES = ("item_category", "item_brand", "item_price", "item_popularity")
VERSION_COLUMN = "policy_version"
IMPRESSIONS = "impressions.parquet"  # each night's logged decisions
LOGGING_VERSION = 0  # night 0: decisions of the generator's logging policy, not a pushed version
DRAW_STRIDE = 1_000_000  # a draw's generator seeds: far from any other draw's (nights use +0..+1,000)


@dataclass
class LoopConfig:
    """One closed-loop run: the world, the nights, and the pipeline's knobs."""

    nights: int = 5
    decisions: int = 20_000  # decisions served (and logged) per night
    seed: int = 0  # the world (LogConfig.seed) and every draw of this run
    # Another run of the same world: other users, clicks, explorations and train halves (0: the
    # draws every earlier figure used). Tells a world's noise from a learner's or a gate's effect.
    draw: int = 0
    ctr: float = 0.05  # LogConfig.ctr: the uniform policy's click-through rate
    # The pipeline's knobs below: None leaves the key out of the night's config, so the product's
    # own default applies (what a user who sets nothing gets); a value is a flag's override.
    agent: str | None = None
    # True: per-arm agent (the item table joined by item_id, item features per candidate). False:
    # one model per arm over the user's features and position (the action is the item's index; the
    # logs still carry item_id and the item table, which the pipeline then does not read).
    per_arm: bool = True
    hidden_sizes: tuple[int, ...] | None = None
    network: str | None = None  # trainer.network (per-arm): 'dot_product' (two towers) or 'common_tower'
    reward_loss: str | None = None  # trainer.reward_loss: 'sigmoid_cross_entropy' (logits) or 'squared_error'
    weight_decay: float | None = None  # trainer.weight_decay
    # The item's id as one more item feature (per-arm): lets the arm tower learn each item's own
    # embedding, which its category, brand, price and popularity do not fully determine (the
    # product adds it itself where the trainer section leaves `network` unset).
    item_id_feature: bool = False
    learning_rate: float | None = None
    batch_size: int | None = None
    train_steps: int | None = None  # per night, warm-started from the last blessed model
    # trainer.num_epochs: passes over the train split per night (the steps then grow with the logs)
    num_epochs: int | None = None
    # True: each night's run ingests every night's logs so far (source pattern night_*/...), each
    # row with the propensity of the policy that logged it; False: tonight's logs only.
    all_nights: bool = True
    serving_epsilon: float | None = None  # trainer.serving_epsilon (None: the trainer's epsilon)
    # trainer.serving_epsilon of night k's run, the last value repeating (a nightly job exploring
    # more while the model is young); (): serving_epsilon every night. The product only.
    serving_epsilon_by_night: tuple[float, ...] = ()
    alpha: float | None = None  # LinUCB / LinTS exploration width (when agent is linear)
    # Hash buckets: eval_share of (train_share + eval_share) go to eval (None: the product's split)
    eval_share: int | None = None
    train_share: int | None = None
    estimator: str | None = None
    num_bootstrap: int | None = None
    # The blessing rule (evaluator.gate): None, the product's; 'lower_bound' (the improvement's
    # lower bound above min_improvement), 'point_estimate', or 'non_inferior'.
    gate: str | None = None
    # experience_gen.splits.key: '' hashes each record's content into train / eval (the product's
    # default), 'impression_id' a unique id per logged decision (a column the logs carry).
    split_key: str = ""
    # evaluator.min_improvement: the improvement over the served policy a candidate needs (its
    # estimate at the rule above); negative tolerates a candidate estimated slightly worse.
    min_improvement: float | None = None
    # evaluator.reward_model: the reward model behind DM and DR ('bilinear': the per-arm model's
    # user x item term x^T B f(m), where the records carry varying candidates).
    reward_model: str | None = None
    # evaluator.switch_tau: Switch-DR's weight threshold (records whose importance weight exceeds
    # it take DM's prediction, not DR's correction); None: tuned per policy by estimated MSE.
    switch_tau: float | None = None
    workdir: str = ""  # "" : a temporary directory, removed afterwards
    keep_workdir: bool = False
    # Each night's `rlops run` through its entry point in this process rather than a subprocess
    # (the test suite's way: the same run without importing TensorFlow and TFX again each night).
    in_process: bool = False
    # --reference only: 'per_item' (one logistic regression per item) or 'lowrank' (one logistic
    # factorization model: user tower . item tower, the click model's own shape); its rank and L2.
    reference_model: str = "per_item"
    reference_rank: int = 4
    reference_l2: float = 1.0
    reference_item_ids: bool = True  # lowrank: each item's own bias and embedding (else features only)
    # --reference, lowrank only: 0 serves epsilon-greedy; T > 0 spreads the (1 - epsilon) share by
    # softmax(predicted click probability / T), exploring the items the model nearly ties (exact
    # propensities, as a serving head could give the Evaluator). See reference_serving_probs.
    reference_temperature: float = 0.0

    @property
    def shares(self) -> tuple[int, int]:
        """(train, eval) hash buckets: the flags', else the product's default split."""
        from rlops.components.experience_gen.config import SplitConfig

        default = {s.name: s.hash_buckets for s in SplitConfig().splits}
        return (self.train_share or default["train"], self.eval_share or default["eval"])

    @property
    def gate_estimator(self) -> str:
        from rlops.components.evaluator.config import EvaluatorConfig

        return self.estimator or EvaluatorConfig().estimator

    def sample_seed(self, base: int) -> int:
        """The generator's sample / sample_contexts seed `base` of this draw (draw 0: `base`)."""
        return base + DRAW_STRIDE * self.draw

    def rng(self, night: int, stream: int) -> np.random.Generator:
        """Night `night`'s random stream `stream` (2 clicks, 3 train halves, 4 the reference's
        decisions) of this world and draw; draw 0 keeps the streams of before draws existed."""
        return np.random.default_rng([self.seed, night, stream, *([self.draw] if self.draw else [])])

    def epsilon_of_night(self, night: int) -> float:
        """trainer.serving_epsilon of night `night`'s pipeline run (the policy it pushes serves next)."""
        by_night = self.serving_epsilon_by_night
        return by_night[min(night, len(by_night) - 1)] if by_night else self.epsilon

    @property
    def epsilon(self) -> float:
        """The serving epsilon: the flag's, else the product's default for this learner (the
        per-arm default's where it applies, else the agent's epsilon)."""
        from rlops.components.trainer.config import TrainerConfig, apply_per_arm_defaults

        if self.serving_epsilon is not None:
            return self.serving_epsilon
        given = {"agent": self.agent} if self.agent else {}
        defaults = apply_per_arm_defaults(given) if self.per_arm else given
        return float(defaults.get("serving_epsilon", TrainerConfig.epsilon))


@dataclass
class Night:
    """What one night produced (see the module docstring)."""

    night: int
    logged_by_version: int  # the version that made this night's decisions (0: logging policy)
    logged_value: float  # its exact true value
    online_ctr: float  # clicks / decisions this night
    versions_ok: bool  # every logged decision carries logged_by_version
    blessed: bool | None
    reason: str | None
    candidate_estimate: float | None
    candidate_lower: float | None
    candidate_upper: float | None
    candidate_value: float  # the candidate's exact true value (served policy it would become)
    candidate_covered: bool | None
    # The paired improvement over the served baseline the gate read (its estimate and interval)
    improvement_estimate: float | None
    improvement_lower: float | None
    improvement_upper: float | None
    # Whether that interval holds the true improvement: the candidate's exact value minus that of
    # the policy that logged tonight's decisions (the incumbent the gate compares with)
    improvement_covered: bool | None
    pushed_version: int | None  # the version this night's run pushed (None: kept the old one)
    served_version: int  # what serves after this night's run
    served_value: float  # its exact true value
    version_source: str  # 'signature' (serving_default returns it) or 'directory'
    run_wall_s: float


@dataclass
class SeedResult:
    seed: int
    draw: int
    logging_value: float
    optimal_value: float
    uniform_value: float
    nights: list[Night] = field(default_factory=list)

    def fraction_of_gap(self, value: float) -> float:
        """0 at the logging policy's value, 1 at the optimum."""
        return (value - self.logging_value) / (self.optimal_value - self.logging_value)


# ---- the world's side: requests, clicks, logs --------------------------------------------------


def world(config: LoopConfig):
    from rlops.envs.logged_feedback import LogConfig, LogGenerator

    return LogGenerator(LogConfig(logging="thompson", ctr=config.ctr, seed=config.seed))


def item_features(config: LoopConfig) -> tuple[str, ...]:
    """The item table's columns the per-arm policy reads (its serving inputs per_arm/<name>)."""
    return ("item_id",) * config.item_id_feature + ITEM_FEATURES


def request(gen, contexts: dict) -> dict[str, np.ndarray]:
    """A serving request: raw global features by name, each item feature as per_arm/<name> [N, K]
    (every item a candidate, in the item table's order) and num_actions."""
    n = len(contexts["position"])
    out = {c: np.asarray(contexts[c]).astype(str) for c in gen.user_columns}
    out.update({c: np.asarray(contexts[c], np.float32) for c in gen.float_columns})
    out["position"] = np.asarray(contexts["position"], np.int64)
    for name in ("item_id",) + ITEM_FEATURES:  # a server sends the item table; the policy reads its own
        values = np.asarray(gen.items[name])
        values = values.astype(str) if values.dtype.kind in "OU" else values.astype(np.float32)
        out[f"per_arm/{name}"] = np.broadcast_to(values, (n, len(values))).copy()
    out["num_actions"] = np.full(n, gen.num_items, np.int64)
    return out


def serve(serving_dir: str, requests: list[dict[str, np.ndarray]], scratch: str) -> tuple[list[dict], dict]:
    """Answers each request with the highest pushed version, in a fresh process without rlops."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from _common import serve_fresh

    responses, info = serve_fresh(str(SERVE_SCRIPT), serving_dir, requests, scratch)
    if info["rlops_imported"]:
        raise RuntimeError("the serving process imported rlops; a server would not have it")
    return responses, info


def served_probs(response: dict, num_actions: int) -> np.ndarray:
    """The served epsilon-greedy policy's exact action probabilities over every candidate: the
    bandit head's numpy twin (all K items are candidates here)."""
    from rlops.heads.epsilon_greedy import epsilon_greedy_probs

    greedy = response["greedy_action"].astype(int)
    return epsilon_greedy_probs(greedy, float(response["epsilon"]), num_actions=num_actions)


def exact_value(gen, population_response: dict) -> float:
    probs = served_probs(population_response, gen.num_items)
    return gen.true_value(lambda contexts: probs)


def check_propensities(response: dict, num_actions: int) -> None:
    """The served propensities are the probabilities we evaluate with (else the value is not exact)."""
    probs = served_probs(response, num_actions)
    expected = probs[np.arange(len(probs)), response["action"].astype(int)]
    if not np.allclose(response["propensity"], expected, atol=1e-5):
        raise AssertionError("serving_default's propensities disagree with its epsilon-greedy probabilities")


def click(gen, contexts: dict, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    ctr = gen.expected_ctr(contexts)[np.arange(len(actions)), actions]
    return (rng.random(len(actions)) < ctr).astype(np.int64)


def night_directory(workdir: str, night: int) -> str:
    """A seed's night under its workdir: the logged decisions (IMPRESSIONS), items, config, summary."""
    return os.path.join(workdir, f"night_{night}")


def write_night(
    directory: str,
    gen,
    contexts: dict,
    actions: np.ndarray,
    propensities: np.ndarray,
    rewards: np.ndarray,
    versions: np.ndarray,
) -> None:
    """The night's logs as a server writes them: impressions (context, item, action, propensity,
    reward, policy version) and the item table, Parquet, in the night's own directory."""
    import pandas as pd

    os.makedirs(directory, exist_ok=True)
    impressions = {c: np.asarray(contexts[c]) for c in gen.user_columns + gen.float_columns + ("position",)}
    impressions.update(
        item_id=gen.items["item_id"][actions],
        action=actions.astype(np.int64),
        propensity=propensities.astype(np.float64),
        reward=rewards.astype(np.int64),
        **{VERSION_COLUMN: versions.astype(np.int64)},
        # A server's request id: unique per decision (the night's directory name makes it unique
        # across nights), so a split keyed on it never depends on the record's content.
        impression_id=np.char.add(f"{os.path.basename(directory)}-", np.arange(len(actions)).astype(str)),
    )
    pd.DataFrame(impressions).to_parquet(os.path.join(directory, IMPRESSIONS), index=False)
    pd.DataFrame(gen.items).to_parquet(os.path.join(directory, "items.parquet"), index=False)


def read_versions(directory: str) -> np.ndarray:
    import pandas as pd

    return pd.read_parquet(os.path.join(directory, IMPRESSIONS), columns=[VERSION_COLUMN])[VERSION_COLUMN].to_numpy()


# ---- the product's side: one nightly pipeline run ----------------------------------------------


def night_yaml(config: LoopConfig, gen, root: str, night_dir: str, night: int) -> dict:
    """The nightly config a user would write for these logs (per-arm: the item table joined by id)."""
    features = [{"name": c} for c in gen.user_columns + gen.float_columns] + [
        {"name": "position", "kind": "categorical"}
    ]
    return {
        "name": "closed-loop",
        "root": root,
        "warm_start": True,
        "experience_gen": {
            "source": {
                "kind": "file",
                "format": "parquet",
                "pattern": os.path.join(
                    os.path.dirname(night_dir) if config.all_nights else night_dir,
                    "night_*" if config.all_nights else "",
                    IMPRESSIONS,
                ),
            },
            **(
                {
                    "item_source": {
                        "kind": "file",
                        "pattern": os.path.join(night_dir, "items.parquet"),
                        "format": "parquet",
                    }
                }
                if config.per_arm
                else {}
            ),
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": gen.num_items - 1},
            "bandit_columns": {
                "features": features,
                **({"item_id": "item_id", "item_features": list(item_features(config))} if config.per_arm else {}),
            },
            **({"splits": splits} if (splits := _splits(config)) else {}),
        },
        "trainer": _given(
            agent=config.agent,
            hidden_sizes=list(config.hidden_sizes) if config.hidden_sizes else None,
            network=config.network,
            reward_loss=config.reward_loss,
            weight_decay=config.weight_decay,
            learning_rate=config.learning_rate,
            batch_size=config.batch_size,
            num_epochs=config.num_epochs,
            train_steps=None if config.num_epochs else config.train_steps,  # passes replace the step budget
            alpha=config.alpha,
            serving_epsilon=config.epsilon_of_night(night)
            if config.serving_epsilon is not None or config.serving_epsilon_by_night
            else None,
            seed=config.seed,
        ),
        "evaluator": _given(
            kind="bandit",
            estimator=config.estimator,
            num_bootstrap=config.num_bootstrap,
            **GATES.get(config.gate or "", {}),
            min_improvement=config.min_improvement,
            reward_model=config.reward_model,
            switch_tau=config.switch_tau,
            seed=config.seed,
        ),
    }


# --bless-on: the evaluator keys of each blessing rule (None: the product's default gate)
GATES: dict[str, dict] = {
    "lower_bound": {"use_lower_bound": True, "max_regression": 0.0},  # the gate before 2026-12-08
    "point_estimate": {"use_lower_bound": False},
    "non_inferior": {"use_lower_bound": True},  # with the product's max_regression
}


def _splits(config: LoopConfig) -> dict:
    """experience_gen.splits as the flags set it ({}: the product's default split)."""
    out: dict = {}
    if config.train_share or config.eval_share:
        train, eval_ = config.shares
        out["splits"] = [{"name": "train", "hash_buckets": train}, {"name": "eval", "hash_buckets": eval_}]
    if config.split_key:
        out["key"] = config.split_key
    return out


def _given(**keys) -> dict:
    """A config section with only the keys a flag set: the rest keep the product's defaults."""
    return {k: v for k, v in keys.items() if v is not None}


def run_rlops(kind: str, config_path: str, overrides: tuple[str, ...], cwd: str, in_process: bool = False) -> dict:
    """`rlops run <kind> --config ...` in a subprocess (or through its entry point in this process);
    returns the run summary JSON."""
    summary_path = os.path.join(cwd, f"{kind}_summary.json")
    argv = ["run", kind, "--config", config_path, "--summary-json", summary_path]
    argv += [a for o in overrides for a in ("--set", o)]
    if in_process:
        from rlops.pipelines import cli

        if (code := cli.main(argv)) != 0:
            raise RuntimeError(f"rlops run {kind} exited {code}")
    else:
        rlops = os.path.join(os.path.dirname(sys.executable), "rlops")
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        proc = subprocess.run([rlops, *argv], capture_output=True, text=True, cwd=cwd, timeout=3600, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"rlops run {kind} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    with open(summary_path) as f:
        return json.load(f)


def run_pipeline(config: LoopConfig, gen, root: str, night_dir: str, night: int) -> dict:
    """`rlops run bandit --config night.yaml` (run_rlops); returns the run summary JSON."""
    import yaml

    config_path = os.path.join(night_dir, "night.yaml")
    with open(config_path, "w") as f:
        yaml.safe_dump(night_yaml(config, gen, root, night_dir, night), f, sort_keys=False)
    return run_rlops("bandit", config_path, (), night_dir, config.in_process)


def _latest(directory: str) -> str:
    """The newest execution's output directory (TFX names them by execution id)."""
    ids = [int(d) for d in os.listdir(directory) if d.isdigit()]
    return os.path.join(directory, str(max(ids)))


def evaluator_metrics(root: str) -> dict:
    with open(os.path.join(_latest(os.path.join(root, "artifacts", "Evaluator", "evaluation")), "metrics.json")) as f:
        return json.load(f)


def candidate_model_dir(root: str) -> str:
    return os.path.join(_latest(os.path.join(root, "artifacts", "Trainer", "model")), "Format-Serving")


def candidate_interval(
    metrics: dict, estimator: str, which: str = "candidate"
) -> tuple[float | None, float | None, float | None]:
    """The Evaluator's estimate of the candidate as it would serve (serving_default's epsilon-greedy:
    metrics.json's `candidate`; its greedy policy is `candidate_greedy`), or of its `improvement`
    over the baseline."""
    est = (metrics.get(which) or {}).get(estimator)
    if not est:
        return None, None, None
    return tuple(float(est[k]) if _finite(est.get(k)) else None for k in ("value", "lower", "upper"))


def serving_versions(serving_dir: str) -> list[int]:
    if not os.path.isdir(serving_dir):
        return []
    return sorted(
        int(v)
        for v in os.listdir(serving_dir)
        if v.isdigit() and os.path.exists(os.path.join(serving_dir, v, "rlops_version.json"))
    )


# ---- the loop ------------------------------------------------------------------------------------


def run_loop(config: LoopConfig, log=print) -> SeedResult:
    gen = world(config)
    result = SeedResult(
        seed=config.seed,
        draw=config.draw,
        logging_value=gen.true_value(gen.logging_policy),
        optimal_value=gen.true_value(gen.optimal_policy),
        uniform_value=gen.true_value(gen.uniform_policy),
    )
    work = config.workdir or tempfile.mkdtemp(prefix=f"closed_loop_{config.seed}_")
    root = os.path.join(work, "pipeline")
    serving_dir = os.path.join(root, "serving")
    population, _ = gen.population_contexts()
    population_request = request(gen, population)
    try:
        # Night 0: the logging policy's decisions.
        logs = gen.sample(config.decisions, seed=config.sample_seed(1000))
        contexts = logs.contexts()
        actions, propensities = logs.impressions["action"], logs.impressions["propensity"]
        rewards = logs.impressions["reward"]
        # `version`: what served tonight by the serving directory (0: the logging policy);
        # `decision_versions`: what each decision says made it (serving_default's policy_version).
        version, value = LOGGING_VERSION, result.logging_value
        decision_versions = np.full(len(actions), LOGGING_VERSION, np.int64)
        for night in range(config.nights):
            night_dir = night_directory(work, night)
            write_night(night_dir, gen, contexts, actions, propensities, rewards, decision_versions)
            logged = read_versions(night_dir)
            t0 = time.perf_counter()
            summary = run_pipeline(config, gen, root, night_dir, night)
            run_wall_s = time.perf_counter() - t0
            metrics = evaluator_metrics(root)
            estimate, lower, upper = candidate_interval(metrics, config.gate_estimator)
            improvement = candidate_interval(metrics, config.gate_estimator, "improvement")
            versions = serving_versions(serving_dir)
            pushed = int(os.path.basename(summary["pushed_destination"])) if summary.get("pushed") else None
            if pushed is not None and pushed != versions[-1]:
                raise AssertionError(f"night {night}: pushed version {pushed} is not the highest served {versions}")
            # Tomorrow's users meet what serves now; the population gives its exact value.
            next_contexts = gen.sample_contexts(config.decisions, seed=config.sample_seed(night + 1))
            if versions:
                (pop, decided), info = serve(
                    serving_dir, [population_request, request(gen, next_contexts)], os.path.join(work, f"serve_{night}")
                )
                check_propensities(decided, gen.num_items)
                served_version, served_value = info["version"], exact_value(gen, pop)
                version_source = info["version_source"]
            else:  # nothing pushed yet: the logging policy keeps serving
                decided = None
                served_version, served_value, version_source = LOGGING_VERSION, result.logging_value, "none"
            candidate_value = (
                served_value if pushed is not None else _candidate_value(gen, root, population_request, work, night)
            )
            covered = None if not _finite(lower, upper) else bool(lower <= candidate_value <= upper)
            result.nights.append(
                Night(
                    night=night,
                    logged_by_version=version,
                    logged_value=value,
                    online_ctr=float(np.mean(rewards)),
                    versions_ok=bool(len(logged) == len(actions) and (logged == version).all()),
                    blessed=summary.get("blessed"),
                    reason=summary.get("blessing_reason"),
                    candidate_estimate=estimate,
                    candidate_lower=lower,
                    candidate_upper=upper,
                    candidate_value=candidate_value,
                    candidate_covered=covered,
                    improvement_estimate=improvement[0],
                    improvement_lower=improvement[1],
                    improvement_upper=improvement[2],
                    improvement_covered=None
                    if not _finite(improvement[1], improvement[2])
                    else bool(improvement[1] <= candidate_value - value <= improvement[2]),
                    pushed_version=pushed,
                    served_version=served_version,
                    served_value=served_value,
                    version_source=version_source,
                    run_wall_s=round(run_wall_s, 1),
                )
            )
            log(
                json.dumps(
                    {
                        "seed": config.seed,
                        **_rounded(asdict(result.nights[-1])),
                        "fraction": round(result.fraction_of_gap(served_value), 3),
                    }
                ),
                file=sys.stderr,
            )
            # Tonight's decisions become tomorrow's logs.
            contexts, value, version = next_contexts, served_value, served_version
            if decided is None:
                decision_versions = np.full(config.decisions, LOGGING_VERSION, np.int64)
                logs = gen.sample(config.decisions, seed=config.sample_seed(1000 + night + 1))
                contexts = logs.contexts()
                actions, propensities = logs.impressions["action"], logs.impressions["propensity"]
                rewards = logs.impressions["reward"]
            else:
                actions = decided["action"].astype(np.int64)
                propensities = decided["propensity"].astype(np.float64)
                rewards = click(gen, contexts, actions, config.rng(night, 2))
                decision_versions = decided["policy_version"].astype(np.int64)
        return result
    finally:
        if not config.workdir and not config.keep_workdir:
            shutil.rmtree(work, ignore_errors=True)


def _candidate_value(gen, root: str, population_request: dict, work: str, night: int) -> float:
    """A rejected candidate's exact value: its own SavedModel, served the same way."""
    staging = os.path.join(work, f"candidate_{night}")
    os.makedirs(staging, exist_ok=True)
    link = os.path.join(staging, "1")
    if not os.path.exists(link):
        shutil.copytree(candidate_model_dir(root), link)
        with open(os.path.join(link, "rlops_version.json"), "w") as f:
            json.dump({"candidate": True}, f)
    (pop,), _ = serve(staging, [population_request], os.path.join(work, f"serve_candidate_{night}"))
    shutil.rmtree(staging, ignore_errors=True)
    return exact_value(gen, pop)


def _finite(*values) -> bool:
    """An interval the Evaluator trusted (it reports none, or NaN bounds, when it does not)."""
    return all(v is not None and np.isfinite(v) for v in values)


def _rounded(d: dict) -> dict:
    """Floats to 6 digits; NaN / Inf (an interval the Evaluator did not trust) to null."""
    return {k: (round(v, 6) if np.isfinite(v) else None) if isinstance(v, float) else v for k, v in d.items()}


# ---- a reference learner: what this data budget allows a well-specified model ----------------------


def reference_loop(config: LoopConfig) -> list[float]:
    """The same loop without the product: a well-specified learner (`reference_model` 'per_item':
    one L2-logistic regression per item on one-hot user values, floats and position, the click
    model's logit being additive in those for a fixed item; 'lowrank': one logistic factorization
    model, user tower . item tower, the click model's own shape with ~4x fewer weights, see
    `_lowrank_scores`) refitted each night on ALL nights' train share so far, its epsilon-greedy
    policy served every night (no Evaluator gate). Returns the served fraction of the gap per night.
    A yardstick, not a strict bound: what a model class that contains the truth reaches with these
    decisions, this exploration and this split."""
    gen = world(config)
    logging_value, optimal = gen.true_value(gen.logging_policy), gen.true_value(gen.optimal_policy)
    population, _ = gen.population_contexts()
    pop_x = gen.encode(population)
    row_of = {row.tobytes(): i for i, row in enumerate(pop_x)}
    share = config.shares[0] / sum(config.shares)
    logs = gen.sample(config.decisions, seed=config.sample_seed(1000))
    contexts, actions, rewards = logs.contexts(), logs.impressions["action"], logs.impressions["reward"]
    xs, acts, rs, fractions = [], [], [], []
    for night in range(config.nights):
        x = gen.encode(contexts)
        train = config.rng(night, 3).random(len(actions)) < share
        xs.append(x[train])
        acts.append(actions[train])
        rs.append(rewards[train])
        probs, value = _reference_policy(config, gen, pop_x, xs, acts, rs)
        fractions.append(round((value - logging_value) / (optimal - logging_value), 4))
        contexts = gen.sample_contexts(config.decisions, seed=config.sample_seed(night + 1))
        rows = np.array([row_of[r.tobytes()] for r in gen.encode(contexts)])
        rng = config.rng(night, 4)
        if config.reference_temperature > 0:  # a draw from each user's served probabilities
            below = rng.random((len(rows), 1)) > probs[rows].cumsum(1)
            actions = np.minimum(below.sum(1), gen.num_items - 1)
        else:  # the same draws as before the temperature existed
            explore = rng.random(len(rows)) < config.epsilon
            actions = np.where(explore, rng.integers(0, gen.num_items, len(rows)), probs.argmax(1)[rows])
        rewards = (rng.random(len(rows)) < gen.expected_ctr(contexts)[np.arange(len(rows)), actions]).astype(int)
    return fractions


def _reference_policy(config: LoopConfig, gen, pop_x: np.ndarray, xs: list, acts: list, rs: list):
    """The reference learner fitted on the logs so far: (its served probabilities per user of the
    population and item, the exact value of that policy)."""
    from sklearn.linear_model import LogisticRegression

    x, a, r = np.concatenate(xs), np.concatenate(acts), np.concatenate(rs)
    if config.reference_model == "lowrank":
        item_x = gen.item_feature_matrix()
        scores = _lowrank_scores(
            pop_x, x, a, r, item_x, config.reference_rank, config.reference_l2, item_ids=config.reference_item_ids
        )
    else:
        scores = _per_item_logits(LogisticRegression, pop_x, x, a, r, gen.num_items)
    probs = reference_serving_probs(scores, config.epsilon, config.reference_temperature)
    return probs, gen.true_value(lambda _: probs)


def reference_serving_probs(scores: np.ndarray, epsilon: float, temperature: float = 0.0) -> np.ndarray:
    """[users, items] served probabilities: epsilon uniformly over the items, the rest on the
    highest score (temperature 0: the Evaluator's epsilon-greedy probabilities, what
    serving_default serves) or by softmax(scores / temperature)."""
    from rlops.components.evaluator.estimators import epsilon_greedy_probs

    if not temperature:
        return epsilon_greedy_probs(scores.argmax(1), scores.shape[1], epsilon)
    aimed = np.exp((scores - scores.max(1, keepdims=True)) / temperature)
    return epsilon / scores.shape[1] + (1.0 - epsilon) * aimed / aimed.sum(1, keepdims=True)


def reference_on_logs(config: LoopConfig) -> list[float]:
    """The reference learner fitted on what the PRODUCT logged (`config.workdir`, kept by run_loop:
    night_<k>/impressions.parquet, each night's train share drawn like reference_loop's), night by
    night: the fraction of the gap its policy would serve. Where it stays under a target, the
    product's own logs did not hold the information to reach it, whatever learner or gate."""
    import pandas as pd

    gen = world(config)
    logging_value, optimal = gen.true_value(gen.logging_policy), gen.true_value(gen.optimal_policy)
    pop_x = gen.encode(gen.population_contexts()[0])
    share = config.shares[0] / sum(config.shares)
    xs, acts, rs, fractions = [], [], [], []
    for night in range(config.nights):
        logs = pd.read_parquet(os.path.join(night_directory(config.workdir, night), IMPRESSIONS))
        logs = logs[config.rng(night, 3).random(len(logs)) < share]
        xs.append(gen.encode(logs))  # the context columns by name
        acts.append(logs["action"].to_numpy())
        rs.append(logs["reward"].to_numpy().astype(float))
        _, value = _reference_policy(config, gen, pop_x, xs, acts, rs)
        fractions.append(round((value - logging_value) / (optimal - logging_value), 4))
    return fractions


def epsilon_ceiling(config: LoopConfig) -> float:
    """The most any served policy can reach (fraction of the gap): the optimum's greedy choice,
    explored with serving_epsilon uniformly over the items."""
    gen = world(config)
    logging_value, optimal = gen.true_value(gen.logging_policy), gen.true_value(gen.optimal_policy)
    eps = config.epsilon_of_night(config.nights - 1)
    value = (1.0 - eps) * optimal + eps * gen.true_value(gen.uniform_policy)
    return (value - logging_value) / (optimal - logging_value)


def _per_item_logits(
    model_cls, pop_x: np.ndarray, x: np.ndarray, actions: np.ndarray, rewards: np.ndarray, num_items: int
) -> np.ndarray:
    """[population, items] logits of one logistic model per item (an item never clicked gets its
    smoothed log click rate)."""
    scores = np.zeros((len(pop_x), num_items))
    for a in range(num_items):
        mine = actions == a
        if rewards[mine].min(initial=0) == rewards[mine].max(initial=0):
            scores[:, a] = np.log((rewards[mine].sum() + 0.5) / (mine.sum() + 10.0))
        else:
            scores[:, a] = model_cls(C=1.0, max_iter=300).fit(x[mine], rewards[mine]).decision_function(pop_x)
    return scores


def _lowrank_scores(
    pop_x: np.ndarray,
    x: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    item_x: np.ndarray,
    rank: int,
    l2: float,
    item_ids: bool = True,
) -> np.ndarray:
    """[population, items] click probabilities of one logistic factorization model, the click
    model's shape (the Evaluator's `low_rank` reward model, reward_models.LowRank):

        logit(x, a) = c + x.w + b_a + (x W) . v_a,   b_a = f_a.beta + e_a,   v_a = f_a M + E_a

    (x: the user's one-hots, floats and position; f_a: the item's features; e_a, E_a: the item's
    own bias and embedding, 0 without `item_ids`), fitted by L-BFGS on the summed log loss + l2 / 2
    * every weight's square (sklearn's C = 1 / l2 convention)."""
    from rlops.components.evaluator.reward_models import fit_low_rank

    model = fit_low_rank(
        x, actions, rewards, np.ones(len(rewards)), len(item_x), "logistic", item_x, rank, l2, item_ids=item_ids
    )
    return model.predict(pop_x)


def summarize(results: list[SeedResult]) -> dict:
    nights = [n for r in results for n in r.nights]
    covered = [n.candidate_covered for n in nights if n.candidate_covered is not None]
    gated = [n.improvement_covered for n in nights if n.improvement_covered is not None]
    return {
        "fraction_of_gap_last_night": [round(r.fraction_of_gap(r.nights[-1].served_value), 4) for r in results],
        "mean_fraction_of_gap_last_night": round(
            float(np.mean([r.fraction_of_gap(r.nights[-1].served_value) for r in results])), 4
        ),
        "ope_coverage": round(float(np.mean(covered)), 4) if covered else None,
        "ope_intervals": len(covered),
        # the gate's own interval (the paired improvement over the incumbent) holding the truth
        "improvement_coverage": round(float(np.mean(gated)), 4) if gated else None,
        "improvement_intervals": len(gated),
        # pushes that served a policy worse in truth than the one it replaced, by that share of its value
        "pushes": sum(n.pushed_version is not None for n in nights),
        "worse_pushes": worse_pushes(results),
        "blessed_nights": sum(bool(n.blessed) for n in nights),
        "all_decisions_versioned": all(n.versions_ok for n in nights),
        "version_source": sorted({n.version_source for n in nights}),
    }


def worse_pushes(results: list[SeedResult]) -> list[dict]:
    """Each push whose policy is worse in truth than the one serving before it: world, night and
    the loss as a share of the replaced policy's value (the gate's margin is such a share)."""
    out = []
    for r in results:
        for n in r.nights:
            if n.pushed_version is not None and n.served_value < n.logged_value - 1e-9:
                loss = (n.logged_value - n.served_value) / n.logged_value
                out.append({"seed": r.seed, "night": n.night, "loss": round(loss, 4)})
    return out


def _epsilons(text: str) -> tuple[float, ...]:
    """--serving-epsilon-by-night: comma-separated epsilons in [0, 1]."""
    try:
        values = tuple(float(e) for e in text.split(",") if e.strip())
    except ValueError:
        values = ()
    if not values or not all(0.0 <= v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated epsilons in [0, 1], got '{text}'")
    return values


def run_directory_name(seed: int, draw: int) -> str:
    """A run's directory under --workdir: seed_<seed>, and _draw_<draw> for draws past 0."""
    return f"seed_{seed}" + (f"_draw_{draw}" if draw else "")


def last_night_by_world(configs: list[LoopConfig], fractions: list[list[float]]) -> dict[str, dict]:
    """Each world's last-night fraction over its draws: mean, spread, and how many reach 0.8 (the
    issue's line), so a world's noise is read from the JSON line itself."""
    by_world: dict[int, list[float]] = {}
    for config, per_night in zip(configs, fractions):
        by_world.setdefault(config.seed, []).append(per_night[-1])
    return {
        str(seed): {
            "mean": round(float(np.mean(v)), 4),
            "sd": round(float(np.std(v, ddof=1)), 4) if len(v) > 1 else None,
            "min": min(v),
            "max": max(v),
            "at_least_0_8": sum(f >= 0.8 for f in v),
            "draws": len(v),
        }
        for seed, v in by_world.items()
    }


def _draws_of(args: argparse.Namespace) -> dict:
    """The JSON line's draw fields, where draws other than 0 ran (earlier lines had none)."""
    if args.draws == 1 and args.first_draw == 0:
        return {}
    return {"draws": args.draws, "first_draw": args.first_draw}


def main() -> None:
    from rlops.components.evaluator.estimators import ESTIMATORS
    from rlops.components.evaluator.reward_models import REWARD_MODEL_CHOICES
    from rlops.components.trainer.agents.reward_network import NETWORKS, REWARD_LOSSES  # the config's own choices

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nights", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=3, help="worlds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument(
        "--draws", type=int, default=1, help="runs of each world: draws first-draw .. first-draw + draws - 1"
    )
    ap.add_argument("--first-draw", type=int, default=0, help="0: the draws of every figure before draws existed")
    ap.add_argument("--decisions", type=int, default=20_000, help="decisions served per night")
    ap.add_argument("--ctr", type=float, default=LoopConfig.ctr)
    ap.add_argument("--agent", default=None, help="trainer.agent (default: the product's)")
    ap.add_argument(
        "--global-features",
        action="store_true",
        help="one model per arm over the user's features (no per-arm item features)",
    )
    ap.add_argument("--alpha", type=float, default=None, help="LinUCB / LinTS exploration width")
    ap.add_argument(
        "--train-share",
        type=int,
        default=None,
        help="hash buckets to train (eval gets 1 per --eval-share; default: the product's split)",
    )
    ap.add_argument("--eval-share", type=int, default=None)
    ap.add_argument(
        "--all-nights", action="store_true", help="every night's logs so far (the default since 2026-12-08)"
    )
    ap.add_argument(
        "--tonight-only",
        action="store_true",
        help="each night ingests tonight's logs only (default: every night's logs so far)",
    )
    ap.add_argument("--train-steps", type=int, default=None)
    ap.add_argument(
        "--network",
        choices=NETWORKS,
        default=None,
        help="trainer.network of the per-arm agent",
    )
    ap.add_argument(
        "--reward-loss",
        choices=REWARD_LOSSES,
        default=None,
        help="trainer.reward_loss",
    )
    ap.add_argument(
        "--hidden-sizes",
        default="",
        help="trainer.hidden_sizes, comma-separated (dot_product: the last is the embedding size)",
    )
    ap.add_argument(
        "--num-epochs", type=int, default=None, help="trainer.num_epochs a night (passes), instead of --train-steps"
    )
    ap.add_argument("--learning-rate", type=float, default=None)
    ap.add_argument("--weight-decay", type=float, default=None, help="trainer.weight_decay")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--item-id-feature", action="store_true", help="per-arm: the item's id is one more item feature")
    ap.add_argument(
        "--serving-epsilon", type=float, default=None, help="trainer.serving_epsilon (default: the product's)"
    )
    ap.add_argument(
        "--serving-epsilon-by-night",
        type=_epsilons,
        default=(),
        help="comma-separated trainer.serving_epsilon per night's run, the last repeating (default: --serving-epsilon)",
    )
    ap.add_argument(
        "--bless-on",
        choices=["lower_bound", "point_estimate", "non_inferior"],
        default=None,
        help="the Evaluator's blessing rule (evaluator.gate; default: the product's)",
    )
    ap.add_argument(
        "--split-key",
        default=LoopConfig.split_key,
        help="experience_gen.splits.key ('' : each record's content; 'impression_id': a unique id per decision)",
    )
    ap.add_argument(
        "--min-improvement",
        type=float,
        default=None,
        help="evaluator.min_improvement (negative: push unless estimated worse by more than this)",
    )
    ap.add_argument(
        "--estimator",
        choices=ESTIMATORS,
        default=None,
        help="evaluator.estimator: the gate's estimator, and the interval whose coverage is reported",
    )
    ap.add_argument(
        "--reward-model",
        choices=REWARD_MODEL_CHOICES,
        default=None,
        help="evaluator.reward_model (bilinear: a user x item term in the per-arm reward model; "
        "low_rank: a factorization shared by every item)",
    )
    ap.add_argument(
        "--switch-tau",
        type=float,
        default=None,
        help="evaluator.switch_tau: Switch-DR's weight threshold (default: tuned per policy)",
    )
    ap.add_argument("--workdir", default="", help="keep every night's logs, configs and pipeline root here")
    ap.add_argument(
        "--reference",
        action="store_true",
        help="run the reference learner (reference_loop) instead of the product, for the same budget",
    )
    ap.add_argument(
        "--reference-model",
        choices=["per_item", "lowrank"],
        default=LoopConfig.reference_model,
        help="--reference's learner: one logistic regression per item, or one logistic factorization model",
    )
    ap.add_argument("--reference-rank", type=int, default=LoopConfig.reference_rank, help="lowrank: its rank")
    ap.add_argument("--reference-l2", type=float, default=LoopConfig.reference_l2, help="lowrank: its L2 weight")
    ap.add_argument(
        "--reference-on-logs",
        default="",
        metavar="WORKDIR",
        help="fit the reference learner on what the product logged in a kept --workdir (reference_on_logs)",
    )
    ap.add_argument(
        "--reference-temperature",
        type=float,
        default=LoopConfig.reference_temperature,
        help="--reference lowrank: serve epsilon uniform + (1 - epsilon) softmax(predicted click / T); 0: greedy",
    )
    ap.add_argument(
        "--reference-no-item-ids",
        action="store_true",
        help="lowrank: item towers from the item features only (no per-item bias or embedding)",
    )
    args = ap.parse_args()
    if args.serving_epsilon_by_night and (args.reference or args.reference_on_logs):
        ap.error("--serving-epsilon-by-night is the product's; the reference serves --serving-epsilon every night")
    if args.reference_temperature < 0 or (
        args.reference_temperature and not (args.reference and args.reference_model == "lowrank")
    ):
        ap.error("--reference-temperature: a number >= 0, with --reference --reference-model lowrank")
    if args.draws < 1 or args.first_draw < 0:
        ap.error(f"--draws must be >= 1 and --first-draw >= 0 (got {args.draws}, {args.first_draw})")
    if args.reference_on_logs:
        args.workdir = args.reference_on_logs  # the kept run's layout: <dir>/seed_<seed>/night_<k>/
    sys.path.insert(0, str(HERE))
    from _common import emit

    t0 = time.perf_counter()
    results = []
    configs = [
        LoopConfig(
            nights=args.nights,
            decisions=args.decisions,
            seed=seed,
            draw=draw,
            ctr=args.ctr,
            agent=args.agent,
            per_arm=not args.global_features,
            alpha=args.alpha,
            train_share=args.train_share,
            eval_share=args.eval_share,
            all_nights=not args.tonight_only,
            train_steps=args.train_steps,
            num_epochs=args.num_epochs,
            network=args.network,
            reward_loss=args.reward_loss,
            hidden_sizes=tuple(int(h) for h in args.hidden_sizes.split(",") if h) or None,
            learning_rate=args.learning_rate,
            weight_decay=args.weight_decay,
            batch_size=args.batch_size,
            item_id_feature=args.item_id_feature,
            serving_epsilon=args.serving_epsilon,
            serving_epsilon_by_night=args.serving_epsilon_by_night,
            gate=args.bless_on,
            min_improvement=args.min_improvement,
            reward_model=args.reward_model,
            switch_tau=args.switch_tau,
            estimator=args.estimator,
            split_key=args.split_key,
            workdir=os.path.join(args.workdir, run_directory_name(seed, draw)) if args.workdir else "",
            reference_model=args.reference_model,
            reference_rank=args.reference_rank,
            reference_l2=args.reference_l2,
            reference_item_ids=not args.reference_no_item_ids,
            reference_temperature=args.reference_temperature,
        )
        for seed in range(args.first_seed, args.first_seed + args.seeds)
        for draw in range(args.first_draw, args.first_draw + args.draws)
    ]
    if args.reference_on_logs:
        wanted = [os.path.join(night_directory(c.workdir, k), IMPRESSIONS) for c in configs for k in range(c.nights)]
        if missing := [path for path in wanted if not os.path.exists(path)]:
            ap.error(
                f"--reference-on-logs: no logs at {missing[0]} (a --workdir kept by a run of these seeds and nights)"
            )
    if args.reference or args.reference_on_logs:
        fractions = [reference_on_logs(c) if args.reference_on_logs else reference_loop(c) for c in configs]
        emit(
            "closed_loop_reference_on_logs" if args.reference_on_logs else "closed_loop_reference",
            nights=args.nights,
            seeds=args.seeds,
            first_seed=args.first_seed,
            **_draws_of(args),
            decisions=args.decisions,
            ctr=args.ctr,
            serving_epsilon=args.serving_epsilon,
            train_share=args.train_share,
            eval_share=args.eval_share,
            reference_model=args.reference_model,
            **(
                {
                    "reference_rank": args.reference_rank,
                    "reference_l2": args.reference_l2,
                    "reference_item_ids": not args.reference_no_item_ids,
                    "reference_temperature": args.reference_temperature,
                }
                if args.reference_model == "lowrank"
                else {}
            ),
            **({"logs_of": args.reference_on_logs} if args.reference_on_logs else {}),
            **({"runs": [[c.seed, c.draw] for c in configs]} if _draws_of(args) else {}),  # [seed, draw] of each list
            fraction_per_night=fractions,
            **({"last_night_by_world": last_night_by_world(configs, fractions)} if args.draws > 1 else {}),
            epsilon_ceiling=[round(epsilon_ceiling(c), 4) for c in configs],
            wall_s=round(time.perf_counter() - t0, 1),
        )
        return
    for cfg in configs:
        results.append(run_loop(cfg))
    per_seed = [
        {
            "seed": r.seed,
            **({"draw": r.draw} if r.draw else {}),
            "logging_value": round(r.logging_value, 6),
            "optimal_value": round(r.optimal_value, 6),
            "uniform_value": round(r.uniform_value, 6),
            **{key: [_rounded(asdict(n))[key] for n in r.nights] for key in Night.__dataclass_fields__},
        }
        for r in results
    ]
    emit(
        "closed_loop",
        nights=args.nights,
        seeds=args.seeds,
        first_seed=args.first_seed,
        **_draws_of(args),
        decisions=args.decisions,
        ctr=args.ctr,
        agent=args.agent,
        per_arm=not args.global_features,
        alpha=args.alpha,
        train_share=args.train_share,
        eval_share=args.eval_share,
        all_nights=not args.tonight_only,
        train_steps=args.train_steps,
        **({"num_epochs": args.num_epochs} if args.num_epochs else {}),
        network=args.network,
        reward_loss=args.reward_loss,
        hidden_sizes=args.hidden_sizes,
        learning_rate=args.learning_rate,
        weight_decay=args.weight_decay,
        batch_size=args.batch_size,
        item_id_feature=args.item_id_feature,
        serving_epsilon=args.serving_epsilon,
        **({"serving_epsilon_by_night": args.serving_epsilon_by_night} if args.serving_epsilon_by_night else {}),
        bless_on=args.bless_on,
        min_improvement=args.min_improvement,
        reward_model=args.reward_model,
        switch_tau=args.switch_tau,
        estimator=args.estimator,
        split_key=args.split_key,
        per_seed=per_seed,
        summary=summarize(results),
        epsilon_ceiling=[round(epsilon_ceiling(c), 4) for c in configs],
        wall_s=round(time.perf_counter() - t0, 1),
    )


if __name__ == "__main__":
    main()
