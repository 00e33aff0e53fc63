"""Simulated slate logs (`source: {kind: simulation, env: slates}`, record_kind: slate): the slate
generator's world (rlops.envs.slate_feedback) logs pages with its logging policy, as production
would log them: one row per page with list columns in display order, the request's user features,
the clicks per slot and the exact propensities.

The world's K items and L slots are the config's (`action_spec`, `slate_length`); `env_kwargs` takes
the other SlateConfig fields (click_model, logging, temperature, ..., and `seed`: the world's users,
items and relevance). The source's `seed` draws the pages: another seed is another day's logs of
the same world. Each shard draws its own pages.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import numpy as np

from rlops.components.experience_gen.config import (
    ExperienceGenConfig,
    FeatureColumn,
    SimulationSource,
    SlateColumns,
)

SLATES_ENV = "slates"
SIZED_BY_CONFIG = {"num_items": "action_spec", "num_slots": "slate_length"}


def slate_world(config: ExperienceGenConfig) -> Any:
    """The generator of the config's world; one error naming the key for what does not fit."""
    from rlops.envs.slate_feedback import SlateConfig, SlateLogGenerator

    src = config.source
    assert isinstance(src, SimulationSource)
    if src.policy != "random" or src.policy_path:
        raise ValueError(
            "experience_gen.source.policy: a slates simulation logs with the generator's own policy; "
            "choose it in env_kwargs (logging: plackett_luce | uniform | epsilon_greedy, temperature, epsilon)"
        )
    given = dict(src.env_kwargs)
    for key, owner in SIZED_BY_CONFIG.items():
        if key in given:
            raise ValueError(
                f"experience_gen.source.env_kwargs.{key}: the slates world takes it from experience_gen.{owner}"
            )
    known = {f.name for f in dataclasses.fields(SlateConfig)} - set(SIZED_BY_CONFIG)
    unknown = sorted(set(given) - known)
    if unknown:
        from rlops.components.json_config import closest

        raise ValueError(f"experience_gen.source.env_kwargs.{unknown[0]}: unknown key; {closest(unknown[0], known)}")
    spec = config.action_spec
    assert spec is not None and spec.maximum is not None  # validated: slates need K
    num_items = int(spec.maximum) - int(spec.minimum or 0) + 1
    try:
        world = SlateConfig(num_items=num_items, num_slots=int(config.slate_length or 0), **given)
    except (TypeError, ValueError) as e:
        raise ValueError(f"experience_gen.source.env_kwargs: {e}") from None
    return SlateLogGenerator(world)


def plan_config(config: ExperienceGenConfig) -> ExperienceGenConfig:
    """The config with the columns the simulated pages have (one row per page, list columns)."""
    world = slate_world(config)
    features = tuple(FeatureColumn(c, kind="categorical", dtype="string") for c in world.user_columns)
    features += tuple(FeatureColumn(c, kind="float") for c in world.float_columns)
    columns = SlateColumns(
        slate_id="slate_id",
        position=None,
        item_id="item_id",
        reward="reward",
        propensity="propensity",
        propensity_cascade="propensity_cascade",
        features=features,
    )
    return dataclasses.replace(config, slate_columns=columns)


def simulate_slates(config: ExperienceGenConfig, shard: int) -> Iterator[dict[str, np.ndarray]]:
    """Column batches of one shard's pages: slate_id, item_id / reward / propensity /
    propensity_cascade [B, L], and the user columns."""
    from rlops.components.experience_gen.simulation import shard_sizes

    src = config.source
    assert isinstance(src, SimulationSource)
    world = slate_world(config)
    left = shard_sizes(src.num_records, src.num_shards)[shard]
    batch = 0
    while left > 0:
        n = min(src.batch_size, left)
        logs = world.sample(n, seed=(src.seed * 1_000_003 + shard) * 1_000_003 + batch)
        cols = {
            "slate_id": np.array([f"{shard}-{batch}-{i}" for i in range(n)], object),
            "item_id": logs.slates.astype(np.int64),
            "reward": logs.rewards.astype(np.float64),
            "propensity": logs.propensity,
            "propensity_cascade": logs.propensity_cascade,
        }
        for c in world.user_columns:
            cols[c] = logs.contexts[c].astype(object)
        for c in world.float_columns:
            cols[c] = logs.contexts[c].astype(np.float64)
        yield cols
        left -= n
        batch += 1
