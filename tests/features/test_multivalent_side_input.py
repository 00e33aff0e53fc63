"""The item table joined as a Beam side input (read with fileio in the pipeline) writes exactly
the records of the in-process join (pipeline.ingest with the plan's own table), and quarantines
the same unknown item ids with the same reasons."""

import numpy as np
from multivalent_logs import config, make_world, write
from test_multivalent import _records

from rlops.components.common import records
from rlops.components.experience_gen import pipeline
from rlops.components.experience_gen.config import ExperienceGenConfig
from rlops.components.experience_gen.core import read_quarantine, run_experience_gen
from rlops.components.experience_gen.kinds import bandit
from rlops.components.experience_gen.sources import Quarantined


def test_side_input_join_matches_the_in_process_join_and_quarantines_unknown_ids(tmp_path):
    logs, items, _ = make_world(400, seed=4)
    logs["item_id"] = logs["item_id"].copy()
    unknown = [5, 77, 301]
    for i in unknown:
        logs["item_id"][i] = f"item_9{i}"
    paths = write(str(tmp_path), logs, items, "parquet")
    cfg = ExperienceGenConfig.from_json({**config(paths, "parquet"), "max_bad_record_ratio": 0.05})
    r = run_experience_gen(cfg, str(tmp_path / "ex"), str(tmp_path / "q"))
    assert (r.records_read, r.records_written, r.records_quarantined) == (400, 397, 3)
    assert r.reasons == {"unknown_item_id": 3}
    side = sorted((q["line"], q["reason"], q["message"]) for q in read_quarantine(str(tmp_path / "q")))
    assert [m for _, _, m in side] == [
        f"item_id: item id 'item_9{i}' is not in the item table ({paths['items']})" for i in unknown
    ]

    # Today's join: the plan's table, in process, through the same ingest + encode + split code.
    plan = pipeline.make_plan(cfg)
    assert plan.item_table is not None
    names = (
        tuple(f.name for f in plan.layout.features)
        + tuple("per_arm/" + f.name for f in plan.item_table.features)
        + ("num_actions",)
    )
    multivalent = {f.name: "" for f in plan.layout.features if f.multivalent}
    expected, rejected = [], []
    for item in plan.items:
        for _, out in pipeline.ingest(plan, item):
            if isinstance(out, Quarantined):
                rejected.append((out.line, out.code, out.message))
                continue
            serialized, which = bandit.encode_and_split(plan.config, out, names, multivalent)
            for i, s in enumerate(serialized):
                expected.append((f"Split-{plan.config.splits.splits[which[i]].name}", s))
    assert sorted(rejected) == side
    import tensorflow as tf

    canon = sorted(
        (
            split,
            tuple(
                sorted(
                    (k, tuple(getattr(v, v.WhichOneof("kind")).value))
                    for k, v in tf.train.Example.FromString(s).features.feature.items()
                )
            ),
        )
        for split, s in expected
    )
    assert len(canon) == 397 and canon == _records(str(tmp_path / "ex"))
    # The joined per-arm values are the item table's, for every candidate.
    got = records.read_logged_bandit(str(tmp_path / "ex"), "train")[records.FEATURES]
    np.testing.assert_allclose(got["per_arm/item_price"][0], items["item_price"].astype(np.float32))
