"""The nightly loop over whole pages, closed: the pushed ranking policy serves pages, the pages are
logged, and `rlops run ranking` retrains, evaluates and pushes, night after night.

Each night, on a slate world with a known click model (rlops.envs.slate_feedback: the ranking
config's world, K = 10 items, pages of L = 3, with `pbm` or `cascade` clicks):
1. the simulated users ask the PUSHED policy (the highest version under the pipeline's serving
   directory) for a page through its `serving_ranked`, in a fresh process that imports TensorFlow
   and numpy only (benchmarks/_serve_ranked.py), as a server would;
2. their clicks on each slot are drawn from the generator's exact click model;
3. the pages are logged as one row per page (Parquet list columns): context, items in display
   order, clicks, the per-position and cascade propensities serving_ranked returned, and the
   policy version that served them;
4. `rlops run ranking --config night.yaml` ingests every night's pages so far, warm-starts the
   RankingAgent, evaluates it against the last blessed model (the logging policy on the first
   night) and pushes it when the gate blesses it.
Night 0's pages come from the world's logging policy (Plackett-Luce at the config's temperature 2).

Per night it records the served page's exact value (its Plackett-Luce probabilities over the whole
user population, from serving_ranked's scores and get_metadata's temperature), the Evaluator's
estimate and interval for the candidate with that candidate's exact value, and the online clicks
per page. With `--compare` (the default), the same night-0 logs also train today's single-item
advice: each page's slots as single-item decisions (position a context feature, the item's
marginal propensity), `rlops run bandit` with the per-arm defaults, its candidate called once per
position with serving_default (its epsilon-greedy draw per slot, duplicates and all) and valued
exactly by the generator (every page of K^L enumerated).

    python benchmarks/closed_loop_ranking.py [--nights 5] [--worlds 3] [--pages 20000] [--click-models pbm,cascade]
    python benchmarks/closed_loop_ranking.py --set trainer.ranking.temperature=0.3   # any night-config override

Prints one JSON line: per-world, per-night lists and a summary per click model (how far the last
night's served page got from the logging policy's value to the optimal page's, interval coverage
over nights x worlds, whether every logged page carries the version pushed that night, and the
ranking policy against the item-by-item one: mean difference of exact values over worlds, its
standard error and z).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import closed_loop as single  # noqa: E402  (the single-item loop's helpers: serving, Evaluator paths)

SERVE_RANKED = HERE / "_serve_ranked.py"
PAGES = "pages.parquet"  # each night's logged pages
VERSION_COLUMN = single.VERSION_COLUMN
LOGGING_VERSION = single.LOGGING_VERSION


@dataclass
class RankLoopConfig:
    """One closed loop over pages: the world, the nights, and overrides of the ranking config."""

    nights: int = 5
    pages: int = 20_000  # pages served (and logged) per night
    seed: int = 0  # the world (SlateConfig.seed) and every draw of this run
    click_model: str = "cascade"
    # `--set` overrides of each night's ranking config (trainer.*, evaluator.*): the recommended
    # settings are the ranking config's own defaults, so none are needed.
    overrides: tuple[str, ...] = ()
    compare: bool = True  # train the item-by-item policy on night 0's logs too
    workdir: str = ""  # "": a temporary directory, removed afterwards
    in_process: bool = False  # run the pipeline through rlops' entry point in this process (a test's)

    def rng(self, night: int, stream: int) -> np.random.Generator:
        """Night `night`'s stream (1 users, 2 clicks) of this world."""
        return np.random.default_rng([self.seed, night, stream])


@dataclass
class Night:
    night: int
    logged_by_version: int  # the version that served this night's pages (0: the logging policy)
    logged_value: float  # its exact value
    clicks_per_page: float  # online, this night
    versions_ok: bool  # every logged page carries logged_by_version
    blessed: bool | None
    reason: str | None
    candidate_estimate: float | None
    candidate_lower: float | None
    candidate_upper: float | None
    candidate_value: float  # the candidate's exact value as it would serve
    candidate_covered: bool | None
    pushed_version: int | None
    served_version: int  # what serves after this night's run
    served_value: float
    serving_imported_rlops: bool | None  # the process that served tomorrow's pages (None: none ran)
    run_wall_s: float


@dataclass
class WorldResult:
    seed: int
    click_model: str
    logging_value: float
    optimal_value: float  # the greedy page by true relevance
    nights: list[Night] = field(default_factory=list)
    comparison: dict = field(default_factory=dict)

    def fraction_of_gap(self, value: float) -> float:
        return (value - self.logging_value) / (self.optimal_value - self.logging_value)


# ---- the world --------------------------------------------------------------------------------


def ranking_defaults() -> dict:
    from rlops.pipelines.config import load_raw

    return load_raw("ranking")


def world(config: RankLoopConfig):
    """The ranking config's simulated world (K, L, logger) with this run's click model and seed."""
    from rlops.envs.slate_feedback import SlateConfig, SlateLogGenerator

    gen = ranking_defaults()["experience_gen"]
    spec = gen["action_spec"]
    kwargs = {**gen["source"].get("env_kwargs", {}), "click_model": config.click_model, "seed": config.seed}
    num_items = int(spec["maximum"]) - int(spec.get("minimum") or 0) + 1
    return SlateLogGenerator(SlateConfig(num_items=num_items, num_slots=int(gen["slate_length"]), **kwargs))


def optimal_value(gen) -> float:
    from rlops.heads.slate.probabilities import Greedy

    return gen.true_value(Greedy(), np.log(gen.relevance)).value


def context_request(gen, users: np.ndarray) -> dict[str, np.ndarray]:
    """serving_ranked's request for these users: raw context features by name and num_actions."""
    out = {c: gen.population[c][users].astype(str) for c in gen.user_columns}
    out.update({c: gen.population[c][users].astype(np.float32) for c in gen.float_columns})
    out["num_actions"] = np.full(len(users), gen.num_items, np.int64)
    return out


def page_policy(response: dict):
    """The numpy twin of the page serving_ranked draws (its exact probabilities)."""
    from rlops.heads.slate.probabilities import EpsilonPerSlot, PlackettLuce

    kind, parameter = str(response["slate_policy"]), float(response["parameter"])
    if kind == "plackett_luce":
        return PlackettLuce(parameter)
    if kind == "epsilon_per_slot":
        return EpsilonPerSlot(parameter)
    raise ValueError(f"serving_ranked serves '{kind}': no exact twin here")


def exact_page_value(gen, population_response: dict) -> float:
    scores = population_response["scores"].astype(np.float64)
    return gen.true_value(page_policy(population_response), scores).value


def check_page_propensities(response: dict, sample: int = 500) -> None:
    """The logged propensities are the served policy's exact ones (else the values are not exact)."""
    policy, scores = page_policy(response), response["scores"][:sample].astype(np.float64)
    slates = response["slate"][:sample].astype(np.int64)
    slots = np.arange(slates.shape[1])
    marginal = policy.marginals(scores, slates.shape[1])[np.arange(len(slates))[:, None], slates, slots]
    if not (
        np.allclose(response["propensity_item_position"][:sample], marginal, atol=1e-4)
        and np.allclose(response["propensity_cascade"][:sample], policy.prefix_probs(scores, slates), atol=1e-4)
    ):
        raise AssertionError("serving_ranked's propensities disagree with its policy's exact probabilities")


def serve_pages(serving_dir: str, requests: list[dict], scratch: str) -> tuple[list[dict], dict]:
    """Answers each request with the highest pushed version's serving_ranked, in a fresh process
    without rlops (whether it imported rlops comes back in the info)."""
    from _common import serve_fresh

    responses, info = serve_fresh(str(SERVE_RANKED), serving_dir, requests, scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    return responses, info


def write_pages(
    directory: str,
    gen,
    users: np.ndarray,
    slates: np.ndarray,
    clicks: np.ndarray,
    propensity: np.ndarray,
    cascade: np.ndarray,
    versions: np.ndarray,
) -> None:
    """The night's pages as a server logs them: one row per page, list columns in display order."""
    import pandas as pd

    os.makedirs(directory, exist_ok=True)
    frame = pd.DataFrame({c: gen.population[c][users] for c in gen.user_columns + gen.float_columns})
    frame.insert(0, "slate_id", np.char.add(f"{os.path.basename(directory)}-", np.arange(len(users)).astype(str)))
    frame["item_id"] = list(slates.astype(np.int64))
    frame["reward"] = list(clicks.astype(np.float64))
    frame["propensity"] = list(propensity.astype(np.float64))
    frame["propensity_cascade"] = list(cascade.astype(np.float64))
    frame[VERSION_COLUMN] = versions.astype(np.int64)
    frame["user"] = users.astype(np.int64)  # ground truth for the item-by-item policy's logs; not read
    frame.to_parquet(os.path.join(directory, PAGES), index=False)


# ---- the product's side: one nightly ranking run -------------------------------------------------


def night_yaml(config: RankLoopConfig, gen, root: str, work: str) -> dict:
    """The nightly config a user would write for these logs: every night's pages so far."""
    features = [{"name": c, "kind": "categorical", "dtype": "string"} for c in gen.user_columns]
    features += [{"name": c, "kind": "float"} for c in gen.float_columns]
    return {
        "name": "closed-loop-ranking",
        "root": root,
        "warm_start": True,
        "experience_gen": {
            "record_kind": "slate",
            "source": {"kind": "file", "format": "parquet", "pattern": os.path.join(work, "night_*", PAGES)},
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": gen.num_items - 1},
            "slate_length": gen.num_slots,
            "slate_columns": {
                "slate_id": "slate_id",
                "position": None,
                "item_id": "item_id",
                "reward": "reward",
                "propensity": "propensity",
                "propensity_cascade": "propensity_cascade",
                "features": features,
            },
        },
        "trainer": {"seed": config.seed},
        "evaluator": {"seed": config.seed},
    }


def write_yaml(path: str, content: dict) -> str:
    import yaml

    with open(path, "w") as f:
        yaml.safe_dump(content, f, sort_keys=False)
    return path


def candidate_page_value(gen, root: str, population_users: np.ndarray, work: str, night: int) -> float:
    """A rejected candidate's exact value: its own SavedModel's serving_ranked, served the same way."""
    staging = os.path.join(work, f"candidate_{night}")
    shutil.copytree(single.candidate_model_dir(root), os.path.join(staging, "1"))
    with open(os.path.join(staging, "1", "rlops_version.json"), "w") as f:
        json.dump({"candidate": True}, f)
    (pop,), _ = serve_pages(staging, [context_request(gen, population_users)], os.path.join(work, "serve_candidate"))
    shutil.rmtree(staging, ignore_errors=True)
    return exact_page_value(gen, pop)


# ---- the loop ------------------------------------------------------------------------------------


def run_loop(config: RankLoopConfig, log=print) -> WorldResult:
    from rlops.pipelines.config import load_raw

    gen = world(config)
    result = WorldResult(
        seed=config.seed,
        click_model=config.click_model,
        logging_value=gen.true_value(gen.logging_policy, gen.logging_scores).value,
        optimal_value=optimal_value(gen),
    )
    work = config.workdir or tempfile.mkdtemp(prefix=f"closed_loop_ranking_{config.seed}_")
    os.makedirs(work, exist_ok=True)
    root = os.path.join(work, "pipeline")
    serving_dir = os.path.join(root, "serving")
    population = np.arange(len(gen.user_weights))
    try:
        write_logging_pages(config, gen, night_directory(work, 0), night=0)
        version, value = LOGGING_VERSION, result.logging_value  # what served night 0's pages
        for night in range(config.nights):
            night_dir = night_directory(work, night)
            if night == 0 and config.compare:
                result.comparison = item_by_item(config, gen, work, night_dir, population)
            config_path = write_yaml(os.path.join(night_dir, "night.yaml"), night_yaml(config, gen, root, work))
            estimator = load_raw("ranking", config_path, config.overrides)["evaluator"]["estimator"]  # the gate's
            t0 = time.perf_counter()
            summary = single.run_rlops("ranking", config_path, config.overrides, night_dir, config.in_process)
            run_wall_s = time.perf_counter() - t0
            interval = single.candidate_interval(single.evaluator_metrics(root), estimator)
            pushed = int(os.path.basename(summary["pushed_destination"])) if summary.get("pushed") else None
            versions = single.serving_versions(serving_dir)
            if pushed is not None and pushed != versions[-1]:
                raise AssertionError(f"night {night}: pushed version {pushed} is not the highest served {versions}")
            # Tomorrow's users ask what serves now; the population gives its exact value.
            next_dir = night_directory(work, night + 1)
            next_users = config.rng(night + 1, 1).choice(len(gen.user_weights), config.pages, p=gen.user_weights)
            if versions:
                (pop, page), info = serve_pages(
                    serving_dir,
                    [context_request(gen, population), context_request(gen, next_users)],
                    os.path.join(work, "serve"),
                )
                check_page_propensities(page)
                served_version, served_value = info["version"], exact_page_value(gen, pop)
                imported_rlops = bool(info["rlops_imported"])
                slates = page["slate"].astype(np.int64)
                shown = np.take_along_axis(gen.relevance[next_users], slates, axis=1)
                clicks = gen.click_model.sample(config.rng(night + 1, 2), shown)
                propensities = (page["propensity_item_position"], page["propensity_cascade"])
                write_pages(next_dir, gen, next_users, slates, clicks, *propensities, page["policy_version"])
            else:  # nothing pushed yet: the logging policy keeps serving
                served_version, served_value, imported_rlops = LOGGING_VERSION, result.logging_value, None
                write_logging_pages(config, gen, next_dir, night=night + 1)
            candidate_value = (
                served_value if pushed is not None else candidate_page_value(gen, root, population, work, night)
            )
            logged = read_pages(night_dir)
            result.nights.append(
                Night(
                    night=night,
                    logged_by_version=version,
                    logged_value=value,
                    clicks_per_page=float(np.stack(logged["reward"].to_list()).sum(1).mean()),
                    versions_ok=bool(len(logged) == config.pages and (logged[VERSION_COLUMN] == version).all()),
                    **gate_fields(summary, interval, candidate_value),
                    pushed_version=pushed,
                    served_version=served_version,
                    served_value=served_value,
                    serving_imported_rlops=imported_rlops,
                    run_wall_s=round(run_wall_s, 1),
                )
            )
            progress = {
                "seed": config.seed,
                "click_model": config.click_model,
                **single._rounded(asdict(result.nights[-1])),
            }
            log(json.dumps({**progress, "fraction": round(result.fraction_of_gap(served_value), 3)}), file=sys.stderr)
            value, version = served_value, served_version
        return result
    finally:
        if not config.workdir:
            shutil.rmtree(work, ignore_errors=True)


def gate_fields(summary: dict, interval: tuple, candidate_value: float) -> dict:
    """Night's Evaluator fields: its verdict, the candidate's interval and whether it holds the truth."""
    _, lower, upper = interval
    covered = None if not single._finite(lower, upper) else bool(lower <= candidate_value <= upper)
    return {
        "blessed": summary.get("blessed"),
        "reason": summary.get("blessing_reason"),
        **dict(zip(("candidate_estimate", "candidate_lower", "candidate_upper"), interval)),
        "candidate_value": candidate_value,
        "candidate_covered": covered,
    }


def night_directory(work: str, night: int) -> str:
    """A world's night under its workdir: the pages that night served (PAGES), its config."""
    return os.path.join(work, f"night_{night}")


def write_logging_pages(config: RankLoopConfig, gen, directory: str, night: int) -> None:
    """A night of the world's logging policy's pages (night 0, or while nothing is pushed)."""
    logs = gen.sample(config.pages, seed=1000 + night)
    versions = np.full(config.pages, LOGGING_VERSION, np.int64)
    args = (logs.users, logs.slates, logs.rewards, logs.propensity, logs.propensity_cascade, versions)
    write_pages(directory, gen, *args)


def read_pages(directory: str):
    import pandas as pd

    return pd.read_parquet(os.path.join(directory, PAGES))


# ---- today's advice: the single-item per-arm policy, called once per position ------------------


def item_rows(gen, pages_path: str, directory: str) -> str:
    """The pages as single-item decisions: one row per shown item with its position as a context
    feature and its marginal propensity at that position (what a per-position bandit logs)."""
    import pandas as pd

    pages = pd.read_parquet(pages_path)
    num_slots = gen.num_slots
    rows = pages.loc[pages.index.repeat(num_slots), list(gen.user_columns + gen.float_columns)].reset_index(drop=True)
    rows["position"] = np.tile(np.arange(num_slots), len(pages))
    items = np.concatenate(pages["item_id"].to_list())
    rows["item_id"] = gen.items["item_id"][items]
    rows["action"] = items.astype(np.int64)
    rows["propensity"] = np.concatenate(pages["propensity"].to_list())
    rows["reward"] = np.concatenate(pages["reward"].to_list()).astype(np.int64)
    os.makedirs(directory, exist_ok=True)
    rows.to_parquet(os.path.join(directory, "impressions.parquet"), index=False)
    pd.DataFrame(gen.items).to_parquet(os.path.join(directory, "items.parquet"), index=False)
    return directory


def item_by_item_yaml(config: RankLoopConfig, gen, root: str, directory: str) -> dict:
    """`rlops run bandit` on the single-item rows: the per-arm defaults (unset), the item's id and
    features on the item side, the user's features and the position on the context side."""
    features = [{"name": c} for c in gen.user_columns + gen.float_columns] + [
        {"name": "position", "kind": "categorical"}
    ]
    return {
        "name": "item-by-item",
        "root": root,
        "experience_gen": {
            "source": {"kind": "file", "format": "parquet", "pattern": os.path.join(directory, "impressions.parquet")},
            "item_source": {"kind": "file", "format": "parquet", "pattern": os.path.join(directory, "items.parquet")},
            "action_spec": {"shape": [], "dtype": "int32", "minimum": 0, "maximum": gen.num_items - 1},
            "bandit_columns": {
                "features": features,
                "item_id": "item_id",
                "item_features": ["item_id", *single.ITEM_FEATURES],
            },
        },
        "trainer": {"seed": config.seed},
        "evaluator": {"seed": config.seed, "num_bootstrap": 100},
    }


def per_position_probs(response: dict, num_items: int, num_slots: int, greedy: bool = False) -> np.ndarray:
    """[U, L, K] each slot's own epsilon-greedy draw (responses stacked position by position)."""
    probs = single.served_probs(response, num_items)
    if greedy:
        probs = np.eye(num_items)[response["greedy_action"].astype(int)]
    return probs.reshape(num_slots, -1, num_items).transpose(1, 0, 2)


def independent_slots_value(gen, probs: np.ndarray, repeats_click: bool = False) -> float:
    """Exact value of pages whose slots are drawn independently ([U, L, K] per-slot probabilities,
    the same item possibly twice): every one of the K^L pages enumerated, valued by the click model.
    An item shown again adds nothing (a server shows it once, leaving the slot empty); with
    `repeats_click`, the click model's formula takes each repeat as a fresh item, which credits a
    page of one item thrice above the best page of three."""
    k, num_slots = gen.num_items, gen.num_slots
    pages = np.stack(np.unravel_index(np.arange(k**num_slots), (k,) * num_slots), axis=1)  # [P, L]
    repeat = (pages[:, :, None] == pages[:, None, :]).any(2, where=np.tri(num_slots, k=-1, dtype=bool))
    per_user = np.zeros(len(probs))
    for u in range(len(probs)):
        p = np.prod(probs[u, np.arange(num_slots), pages], axis=1)  # [P]
        shown = gen.relevance[u][pages] * (repeats_click | ~repeat)
        per_user[u] = p @ gen.click_model.expected(shown).sum(1)
    return float(gen.user_weights @ per_user)


def item_by_item(config: RankLoopConfig, gen, work: str, night_dir: str, population: np.ndarray) -> dict:
    """Today's advice trained on night 0's pages and valued exactly, served (epsilon per slot) and greedy."""
    directory = item_rows(gen, os.path.join(night_dir, PAGES), os.path.join(work, "item_by_item"))
    root = os.path.join(directory, "pipeline")
    config_path = write_yaml(os.path.join(directory, "bandit.yaml"), item_by_item_yaml(config, gen, root, directory))
    t0 = time.perf_counter()
    single.run_rlops("bandit", config_path, (), directory)
    wall = time.perf_counter() - t0
    contexts = {c: np.tile(gen.population[c][population], gen.num_slots) for c in gen.user_columns + gen.float_columns}
    contexts["position"] = np.repeat(np.arange(gen.num_slots), len(population))
    staging = os.path.join(directory, "candidate")
    shutil.copytree(single.candidate_model_dir(root), os.path.join(staging, "1"))
    with open(os.path.join(staging, "1", "rlops_version.json"), "w") as f:
        json.dump({"candidate": True}, f)
    (response,), _ = single.serve(staging, [single.request(gen.world, contexts)], os.path.join(directory, "serve"))
    served = per_position_probs(response, gen.num_items, gen.num_slots)
    greedy = per_position_probs(response, gen.num_items, gen.num_slots, greedy=True)
    duplicates = float(
        gen.user_weights @ (np.sort(greedy.argmax(2), 1)[:, 1:] == np.sort(greedy.argmax(2), 1)[:, :-1]).any(1)
    )
    return {
        "item_by_item_value": round(independent_slots_value(gen, served), 6),
        "item_by_item_greedy_value": round(independent_slots_value(gen, greedy), 6),
        "item_by_item_value_repeats_click": round(independent_slots_value(gen, served, repeats_click=True), 6),
        "item_by_item_epsilon": float(response["epsilon"]),
        "item_by_item_greedy_duplicate_share": round(duplicates, 4),
        "item_by_item_run_wall_s": round(wall, 1),
    }


# ---- the report -----------------------------------------------------------------------------------


def summarize(results: list[WorldResult]) -> dict:
    out = {}
    for model in sorted({r.click_model for r in results}):
        mine = [r for r in results if r.click_model == model]
        nights = [n for r in mine for n in r.nights]
        covered = [n.candidate_covered for n in nights if n.candidate_covered is not None]
        fractions = [r.fraction_of_gap(r.nights[-1].served_value) for r in mine]
        entry = {
            "fraction_of_gap_last_night": [round(f, 4) for f in fractions],
            "mean_fraction_of_gap_last_night": round(float(np.mean(fractions)), 4),
            "served_rises": all(
                r.nights[-1].served_value > r.logging_value
                and all(b.served_value >= a.served_value - 1e-9 for a, b in zip(r.nights, r.nights[1:]))
                for r in mine
            ),
            "ope_coverage": round(float(np.mean(covered)), 4) if covered else None,
            "ope_intervals": len(covered),
            "blessed_nights": sum(bool(n.blessed) for n in nights),
            "all_pages_versioned": all(n.versions_ok for n in nights),
            "served_without_rlops": all(n.serving_imported_rlops is False for n in nights if n.pushed_version),
        }
        compared = [r for r in mine if r.comparison]
        if compared:
            # the ranking candidate trained on night 0's pages, as served, against today's advice on the same pages
            diffs = np.array([r.nights[0].candidate_value - r.comparison["item_by_item_value"] for r in compared])
            se = float(diffs.std(ddof=1) / np.sqrt(len(diffs))) if len(diffs) > 1 else float("nan")
            entry["ranking_minus_item_by_item"] = {
                "mean": round(float(diffs.mean()), 6),
                "se": round(se, 6),
                "z": round(float(diffs.mean() / se), 2) if se > 0 else None,
                "per_world": [round(float(d), 6) for d in diffs],
            }
        out[model] = entry
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nights", type=int, default=5)
    ap.add_argument("--worlds", type=int, default=3, help="worlds first-world .. first-world + worlds - 1")
    ap.add_argument("--first-world", type=int, default=0)
    ap.add_argument("--pages", type=int, default=20_000, help="pages served per night")
    ap.add_argument("--click-models", default="pbm,cascade", help="comma-separated: pbm, cascade, dcm")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a night-config override")
    ap.add_argument("--no-compare", action="store_true", help="skip the item-by-item policy")
    ap.add_argument("--workdir", default="", help="keep every night's pages, configs and pipeline root here")
    args = ap.parse_args()
    from rlops.envs.slate_feedback import CLICK_MODELS

    models = [m for m in args.click_models.split(",") if m]
    if not models or any(m not in CLICK_MODELS for m in models):
        ap.error(f"--click-models: comma-separated of {', '.join(CLICK_MODELS)}, got '{args.click_models}'")
    if args.nights < 1 or args.pages < 100 or args.worlds < 1:
        ap.error("--nights and --worlds must be >= 1, --pages >= 100")
    from _common import emit

    t0 = time.perf_counter()
    configs = [
        RankLoopConfig(
            nights=args.nights,
            pages=args.pages,
            seed=seed,
            click_model=model,
            overrides=tuple(args.set),
            compare=not args.no_compare,
            workdir=os.path.join(args.workdir, f"{model}_{seed}") if args.workdir else "",
        )
        for model in models
        for seed in range(args.first_world, args.first_world + args.worlds)
    ]
    results = [run_loop(c) for c in configs]
    from rlops.components.trainer.agents.ranking import RankingOptions
    from rlops.components.trainer.config import RANKING_DEFAULTS

    emit(
        "closed_loop_ranking",
        nights=args.nights,
        worlds=args.worlds,
        first_world=args.first_world,
        pages=args.pages,
        click_models=models,
        trainer_defaults={**RANKING_DEFAULTS, "ranking": asdict(RankingOptions())},  # before the overrides
        overrides=args.set,
        per_world=[
            {
                "seed": r.seed,
                "click_model": r.click_model,
                "logging_value": round(r.logging_value, 6),
                "optimal_value": round(r.optimal_value, 6),
                **{key: [single._rounded(asdict(n))[key] for n in r.nights] for key in Night.__dataclass_fields__},
                **r.comparison,
            }
            for r in results
        ],
        summary=summarize(results),
        wall_s=round(time.perf_counter() - t0, 1),
    )


if __name__ == "__main__":
    main()
