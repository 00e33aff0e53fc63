"""Vertex AI request-response logging (BigQuery) -> ExperienceGen's bandit records, by config alone.

The fixture rows have the logging table's shape (endpoint, deployed_model_id, logging_time,
request_id, request_payload and response_payload: REPEATED STRING, one JSON instance /
prediction each, as BigQuery's JSON export writes them) plus the reward joined from the user's
own feedback events by request id. The serving model is rlops' `serving_default`: instances hold
the raw named features, predictions hold action, propensity and greedy_action. The guide's
BigQuery block itself (docs/ingestion.md) runs in tests/test_docs.py.
"""

from __future__ import annotations

import json

import numpy as np

from rlops.components.experience_gen import (
    BanditColumns,
    ExperienceGenConfig,
    FileSource,
    SpecConfig,
    json_paths,
    pipeline,
)
from rlops.components.experience_gen.batches import ValidBatch
from rlops.components.experience_gen.config import FeatureColumn
from rlops.components.experience_gen.sources import Quarantined

COLUMNS = BanditColumns(
    action="response_payload[0].action",
    propensity="response_payload[0].propensity",
    reward="reward",
    features=(
        FeatureColumn("user_a", column="request_payload[0].user_a", kind="float"),
        FeatureColumn("country", column="request_payload[0].country", kind="categorical", dtype="string"),
    ),
)


def logged_row(i: int, user_a: float, country: str, action: int, propensity: float, reward: float) -> dict:
    return {
        "endpoint": "projects/1/locations/us-central1/endpoints/42",
        "deployed_model_id": "7",
        "logging_time": f"2026-11-23T10:00:{i:02d}Z",
        "request_id": str(1000 + i),
        "request_payload": [json.dumps({"user_a": user_a, "country": country})],
        "response_payload": [json.dumps({"action": action, "propensity": propensity, "greedy_action": action})],
        "reward": reward,
    }


def ingest(path) -> tuple[dict[str, np.ndarray], list[Quarantined]]:
    config = ExperienceGenConfig(
        source=FileSource(pattern=str(path), format="jsonl"), bandit_columns=COLUMNS, action_spec=SpecConfig.discrete(4)
    )
    plan = pipeline.make_plan(config)
    batches, bad = [], []
    for item in plan.items:
        for _, out in pipeline.ingest(plan, item):
            if isinstance(out, Quarantined):
                bad.append(out)
            elif isinstance(out, ValidBatch):
                batches.append(out.columns)
    merged = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]} if batches else {}
    return merged, bad


def test_logged_requests_and_responses_become_bandit_records(tmp_path):
    rng = np.random.default_rng(0)
    n = 40
    expected = [
        (
            float(rng.normal()),
            ["fr", "de", "us"][i % 3],
            int(rng.integers(0, 4)),
            float(rng.uniform(0.1, 0.9)),
            float(rng.integers(0, 2)),
        )
        for i in range(n)
    ]
    path = tmp_path / "request_response_logging.jsonl"
    path.write_text("".join(json.dumps(logged_row(i, *e)) + "\n" for i, e in enumerate(expected)))
    records, bad = ingest(path)
    assert bad == []
    np.testing.assert_allclose(records["user_a"].reshape(-1), [e[0] for e in expected], rtol=1e-6)
    assert [str(c.decode() if isinstance(c, bytes) else c) for c in records["country"].reshape(-1)] == [
        e[1] for e in expected
    ]
    np.testing.assert_array_equal(records["action"].reshape(-1), [e[2] for e in expected])
    np.testing.assert_allclose(records["propensity"].reshape(-1), [e[3] for e in expected], rtol=1e-6)
    np.testing.assert_allclose(records["reward"].reshape(-1), [e[4] for e in expected])


def test_a_payload_missing_a_field_is_quarantined_naming_the_path(tmp_path):
    rows = [logged_row(0, 0.5, "fr", 1, 0.5, 1.0), logged_row(1, 0.2, "de", 2, 0.25, 0.0)]
    rows[1]["response_payload"] = [json.dumps({"action": 2, "greedy_action": 2})]  # no propensity
    path = tmp_path / "logs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    records, bad = ingest(path)
    assert len(records["action"]) == 1 and len(bad) == 1
    assert "response_payload[0].propensity" in json.loads(bad[0].to_json())["message"]


def test_paths_parse_and_only_path_columns_pay():
    assert json_paths.parse("request_payload[0].user_a") == ("request_payload", (0, "user_a"))
    assert json_paths.parse("reward") is None and json_paths.parse("a[x]") is None
    columns = {"reward": [1.0]}
    assert json_paths.with_paths(columns, ["reward"], 1) is columns  # no copy, no parsing
    assert json_paths.resolve(['{"a": [1, {"b": 2}]}', None, "not json", '{"a": []}'], 4, ("a", 1, "b")) == [
        2,
        None,
        None,
        None,
    ]
    assert json_paths.resolve([[{"x": 3}]], 1, (0, "x")) == [3]  # already parsed by the reader
