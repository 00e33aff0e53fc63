"""The nightly loop over pages, closed once (benchmarks/closed_loop_ranking.py, small): the logging
policy's pages train, evaluate and push a ranking policy through `rlops run ranking`; tomorrow's
users get their pages from the pushed `serving_ranked` in a process without rlops, click by the
generator's click model, and those pages are logged with the version that served them. Checked
against the generator's exact values."""

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from rlops.heads.slate.probabilities import PlackettLuce

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import closed_loop_ranking  # noqa: E402

PAGES = 4_000  # night 0's eval split (~400 pages) is the least on which the gate trusts a Plackett-Luce page
CHEAP = (  # the cheapest loop that closes: a small bootstrap, the gate on its point estimate, the widest page
    "evaluator.num_bootstrap=100",
    "evaluator.use_lower_bound=false",
    "trainer.ranking.temperature=0.5",
)


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    cl = closed_loop_ranking
    config = cl.RankLoopConfig(
        nights=1,  # night 1's pages are served by night 0's push: the loop closes once
        pages=PAGES,
        seed=0,
        click_model="cascade",
        overrides=CHEAP,
        compare=False,
        workdir=str(tmp_path_factory.mktemp("closed_loop_ranking")),
        in_process=True,
    )
    return cl, config, cl.run_loop(config, log=lambda *a, **k: None)


def test_the_pushed_version_serves_every_page_of_the_next_night_from_a_process_without_rlops(loop):
    cl, config, result = loop
    [night] = result.nights
    assert night.blessed and night.pushed_version is not None, night.reason
    assert night.versions_ok and night.logged_by_version == cl.LOGGING_VERSION
    assert night.served_version == night.pushed_version and night.serving_imported_rlops is False
    pages = pd.read_parquet(os.path.join(cl.night_directory(config.workdir, 1), cl.PAGES))
    assert len(pages) == PAGES and set(pages[cl.VERSION_COLUMN]) == {night.pushed_version}
    slates = np.stack(pages["item_id"].to_list())
    assert slates.shape == (PAGES, 3) and (np.sort(slates, 1)[:, 1:] != np.sort(slates, 1)[:, :-1]).all()
    cascade = np.stack(pages["propensity_cascade"].to_list())
    assert (np.diff(cascade, axis=1) <= 0).all() and (cascade > 0).all()


def test_the_served_pages_beat_the_logging_policy_by_the_exact_truth(loop):
    """The served value the loop reports is the pushed model's Plackett-Luce page on the whole user
    population, recomputed here from its scores; it beats the logger's, and the logged clicks of
    the night it served agree with it."""
    cl, config, result = loop
    [night] = result.nights
    gen = cl.world(config)
    version_dir = os.path.join(config.workdir, "pipeline", "serving", str(night.pushed_version))
    loaded = tf.saved_model.load(version_dir)
    request = cl.context_request(gen, np.arange(len(gen.user_weights)))
    feeds = {k: tf.constant(v.astype(object) if v.dtype.kind == "U" else v) for k, v in request.items()}
    scores = loaded.signatures["serving_ranked"](**feeds)["scores"].numpy().astype(np.float64)
    temperature = float(loaded.signatures["get_metadata"]()["temperature"].numpy())
    value = gen.true_value(PlackettLuce(temperature), scores).value
    assert night.served_value == pytest.approx(value, abs=1e-6)
    assert value > result.logging_value + 0.1 * (result.optimal_value - result.logging_value), (
        value,
        result.logging_value,
        result.optimal_value,
    )
    pages = pd.read_parquet(os.path.join(cl.night_directory(config.workdir, 1), cl.PAGES))
    clicks = np.stack(pages["reward"].to_list()).sum(1)
    assert abs(clicks.mean() - value) < 4 * clicks.std() / np.sqrt(len(clicks)), (clicks.mean(), value)
