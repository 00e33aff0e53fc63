"""Loads a policy SavedModel with plain TensorFlow and acts on given observations.

Run as a separate process (`python -m rlops.components.pusher.verify DIR INPUTS.npz [DRAWS.npz
CALLS_MANY ROWS_MANY]`) so the check proves what a server would see: nothing from the
training process (rlops objects, registered Python classes, warm caches) is around. It imports
TensorFlow, numpy and json only. Prints one JSON line: {"ok": bool, "num_actions": n, "draws":
bool, "error": ...}. With DRAWS.npz, it also calls `serving_default` on the first row (batch 1; 100
to 2000 calls, ~60 / epsilon: rlops.heads.draws.draw_calls' rule) and CALLS_MANY times on
the first ROWS_MANY rows, and writes what it drew (`one_*`,
`many_*`: action, propensity, greedy_action [calls, rows]), the inputs it fed (`feed_<name>`) and
`epsilon`, for the parent to test against the serving head's probabilities. A per-arm policy with
its item table serves candidate ids as `serving_default`: the draws are then taken from
`serving_features` (the rows' feature arrays), and `serving_default` is called by id on the same
rows (`_check_by_id`).
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def verify(
    saved_model_dir: str,
    inputs_npz: str,
    draws_npz: str | None = None,
    calls_many: int | str = 8,  # str: from the command line
    rows_many: int | str = 64,
) -> dict:
    import numpy as np
    import tensorflow as tf

    data = dict(np.load(inputs_npz))
    policy = tf.saved_model.load(saved_model_dir)
    action_fn = policy.signatures["action"]
    _, input_specs = action_fn.structured_input_signature
    batch = min(len(v) for v in data.values()) if data else 0
    if batch == 0:  # zero rows would "pass" without the policy ever acting
        return {"ok": False, "error": f"no verification inputs: {sorted(data) or 'no arrays'} hold 0 rows"}
    feeds = {}
    for name, spec in input_specs.items():
        if name in data:
            feeds[name] = tf.constant(data[name], spec.dtype)
        elif name == "step_type":
            feeds[name] = tf.zeros([batch], spec.dtype)  # FIRST
        elif name == "discount":
            feeds[name] = tf.ones([batch], spec.dtype)
        elif name == "reward":
            feeds[name] = tf.zeros([batch], spec.dtype)
        else:
            return {"ok": False, "error": f"no input data for signature input '{name}'"}
    actions = action_fn(**feeds)["action"].numpy()
    with open(os.path.join(saved_model_dir, "policy_specs.json")) as f:
        action_spec = json.load(f)["action_spec"]
    lo, hi = _bounds(action_spec)
    ok = actions.shape[0] == batch and bool(np.all(np.isfinite(actions)))
    if lo is not None:
        ok = ok and bool(np.all(actions >= lo) and np.all(actions <= hi))
    if not ok:
        return {"ok": False, "error": f"actions out of spec bounds [{lo}, {hi}] or not finite: {actions[:10]}"}
    result = {"ok": True, "num_actions": int(batch), "actions_head": actions[:5].tolist()}
    result["draws"] = False
    # feature arrays go to serving_features where the policy serves ids as serving_default (an
    # exported item table: rlops.train.policy_files.FEATURES_SIGNATURE; no rlops import here)
    features_signature = "serving_features" if "serving_features" in policy.signatures else "serving_default"
    if "serving_default" in policy.signatures:
        serve = policy.signatures[features_signature]
        feeds = _serving_feeds(serve, data, feeds)
        if isinstance(feeds, str):
            return {"ok": False, "error": feeds}
        error = _check_serving_default(serve, feeds, batch, lo, hi, saved_model_dir)
        if error:
            return {"ok": False, "error": error}
        if features_signature != "serving_default":
            error = _check_by_id(policy.signatures, feeds, batch, saved_model_dir)
            if error:
                return {"ok": False, "error": error}
        if draws_npz:
            epsilon = float(policy.signatures["get_metadata"]()["serving_epsilon"].numpy())
            _write_draws(serve, feeds, epsilon, draws_npz, int(calls_many), int(rows_many))
            result["draws"] = True
    return result


def _serving_feeds(serve, data, action_feeds):
    """The verification rows under serving_default's input names (the `action` feeds less their
    `observation_` prefix), or an error."""
    import tensorflow as tf

    _, specs = serve.structured_input_signature
    feeds = {}
    for name, spec in specs.items():
        value = action_feeds.get("observation_" + name, data.get(name))
        if value is None and len(specs) == 1 and "observation" in action_feeds:
            value = action_feeds["observation"]  # one dense observation, named by its spec
        if value is None:
            return f"serving_default: no input data for input '{name}'"
        feeds[name] = tf.cast(value, spec.dtype) if spec.dtype != tf.string else tf.constant(value)
    return feeds


def _write_draws(serve, feeds, epsilon, path, calls_many, rows_many):
    """serving_default called repeatedly at batch 1 (the first row) and at batch rows_many."""
    import numpy as np

    out = {"epsilon": np.asarray(epsilon)}
    # rlops.heads.draws.draw_calls for a row leaving its greedy action with probability >= epsilon / 2
    calls_one = int(np.clip(np.ceil(60 / max(epsilon, 1e-9)), 100, 2000))
    for prefix, rows, calls in (("one", 1, calls_one), ("many", rows_many, calls_many)):
        part = {k: v[:rows] for k, v in feeds.items()}
        answers = [serve(**part) for _ in range(calls)]
        for key in ("action", "propensity", "greedy_action"):
            out[f"{prefix}_{key}"] = np.stack([a[key].numpy() for a in answers])
    for k, v in feeds.items():
        value = v[:rows_many].numpy()
        out[f"feed_{k}"] = value.astype(np.bytes_) if value.dtype == object else value  # no pickles
    np.savez(path, **out)


def _check_serving_default(serve, feeds, batch, lo, hi, saved_model_dir):
    """What a server calls: the same rows under their serving input names. Its action in bounds, a
    propensity in (0, 1], and the version the SavedModel's own asset holds in every row. Returns an
    error, or None."""
    import numpy as np

    out = {k: v.numpy() for k, v in serve(**feeds).items()}
    action, propensity = out["action"], out["propensity"]
    if action.shape[0] != batch or (lo is not None and not np.all((action >= lo) & (action <= hi))):
        return f"serving_default: actions out of spec bounds [{lo}, {hi}]: {action[:10]}"
    if not np.all((propensity > 0) & (propensity <= 1)):
        return f"serving_default: propensities outside (0, 1]: {propensity[:10]}"
    if "policy_version" in out:
        # policy_saver.VERSION_ASSET (this module imports no rlops: it runs as a server would)
        with open(os.path.join(saved_model_dir, "assets", "rlops_policy_version.txt")) as f:
            want = int(f.read().strip())
        if not np.all(out["policy_version"] == want):
            return f"serving_default: policy_version {out['policy_version'][:3]} is not its asset's {want}"
    return None


def _check_by_id(signatures, feature_feeds, batch, saved_model_dir):
    """serving_default by candidate id (a per-arm policy with its item table): the verification
    rows' global features with the table's first ids as candidates (a pad in the last slot) answer
    ids among them, never the pad, with propensities in (0, 1]; an unknown id fails naming it;
    `serving_page`, where exported, shows distinct candidates with propensities in (0, 1].
    Returns an error, or None."""
    import numpy as np
    import tensorflow as tf

    with open(os.path.join(saved_model_dir, "item_table.json")) as f:  # rlops.features.item_catalog
        table = json.load(f)
    serve = signatures["serving_default"]
    _, specs = serve.structured_input_signature
    dtype = specs["candidate_ids"].dtype
    pad = "" if dtype == tf.string else -1
    page_size = int(signatures["get_metadata"]().get("page_size", 0)) if "serving_page" in signatures else 0
    ids = table["ids"][: max(1, min(max(5, page_size), len(table["ids"])))]
    width = len(ids) + 1
    feeds = {}
    for name in specs:
        if name == "candidate_ids":
            feeds[name] = tf.constant([ids + [pad]] * batch, dtype)
        elif name in feature_feeds:  # a global feature, or a per-candidate context feature [B, K]
            value = feature_feeds[name]
            feeds[name] = value[:, :width] if name.startswith("per_arm_") else value
        else:
            return f"serving_default: no input data for input '{name}'"
    if any(int(v.shape[1]) != width for k, v in feeds.items() if k.startswith("per_arm_")):
        feeds = {
            k: (tf.pad(v, [[0, 0], [0, width - int(v.shape[1])]]) if k.startswith("per_arm_") else v)
            for k, v in feeds.items()
        }
    out = {k: v.numpy() for k, v in serve(**feeds).items()}
    chosen = _decoded(out["item_id"].tolist())
    if any(x not in ids for x in chosen):
        return f"serving_default: item_id {chosen[:5]} not among the candidates {ids}"
    if not np.all((out["propensity"] > 0) & (out["propensity"] <= 1)):
        return f"serving_default: propensities outside (0, 1]: {out['propensity'][:10]}"
    if page_size and len(ids) >= page_size:
        page = {k: v.numpy() for k, v in signatures["serving_page"](**feeds).items()}
        shown = page["page"].tolist()
        if any(len(set(row)) != page_size or any(x not in ids for x in _decoded(row)) for row in shown):
            return f"serving_page: pages {shown[:3]} are not {page_size} distinct candidates of {ids}"
        for key in ("propensity_item_position", "propensity_cascade"):
            if not np.all((page[key] > 0) & (page[key] <= 1)):
                return f"serving_page: {key} outside (0, 1]: {page[key][:3]}"
    known = set(table["ids"])
    unknown = "rlops-unknown-id" if dtype == tf.string else max(known) + 1
    while unknown in known:  # a string id that happens to be taken
        unknown += "-"
    bad = dict(feeds, candidate_ids=tf.constant([[unknown] + ids] * batch, dtype))
    try:
        serve(**bad)
    except tf.errors.InvalidArgumentError as e:
        return (
            None
            if str(unknown) in e.message
            else f"serving_default: the unknown-id error does not name it: {e.message[:200]}"
        )
    return f"serving_default: unknown candidate id {unknown!r} was scored instead of failing the call"


def _decoded(values):
    return [x.decode() if isinstance(x, bytes) else x for x in values]


def _bounds(encoded_spec):
    """Minimum/maximum from policy_specs.json's encoded spec, whatever its nesting."""
    if isinstance(encoded_spec, dict):
        if "minimum" in encoded_spec and "maximum" in encoded_spec:
            return encoded_spec["minimum"], encoded_spec["maximum"]
        for value in encoded_spec.values():
            lo, hi = _bounds(value)
            if lo is not None:
                return lo, hi
    if isinstance(encoded_spec, list):
        for value in encoded_spec:
            lo, hi = _bounds(value)
            if lo is not None:
                return lo, hi
    return None, None


if __name__ == "__main__":
    try:
        result = verify(*sys.argv[1:6])
    except Exception as e:  # report, don't traceback: the parent turns this into its error
        result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
