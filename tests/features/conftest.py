"""Fixtures of the feature tests (helpers live in feature_logs.py)."""

import pytest
from feature_logs import make_logs, write_csv


@pytest.fixture(scope="session")
def logs_csv(tmp_path_factory):
    d = tmp_path_factory.mktemp("logs")
    cols, best = make_logs(4000)
    write_csv(d / "logs.csv", cols)
    return d / "logs.csv", cols, best
