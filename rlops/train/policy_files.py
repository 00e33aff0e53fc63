"""The files an exported policy directory holds, by name: the contract between the exporters
(policy_saver, litert), the Pusher's publisher and servers. No TensorFlow here, so publishing,
rolling back and reading a version do not import it (several seconds and ~0.5 GB a process)."""

SPECS_FILE = "policy_specs.json"
SPECS_FORMAT = "rlops.policy_specs/1"
# serving_default's `policy_version` comes from this asset (one line: the version number), read once
# at load time; the Pusher rewrites it in each version it publishes (pusher/publish.py).
VERSION_ASSET = "rlops_policy_version.txt"
UNPUBLISHED_VERSION = -1  # the asset's number before a Pusher publishes the policy
LITERT_FILE = "policy.tflite"  # the LiteRT policy beside the SavedModel, when exported
LITERT_SPEC_FILE = "policy_litert.json"  # its description: inputs, outputs, version
# The decision kind an export was trained for (rlops.components.common.decision_kinds): in
# policy_specs.json and get_metadata. Exports without it are read as one of the two kinds that
# existed before it travelled (policy_saver.model_decision_kind).
DECISION_KIND = "decision_kind"
LEGACY_BANDIT, LEGACY_SLATE = "bandit", "slate"
# A per-arm policy exported with its item table serves candidate ids as `serving_default`; the
# signature taking feature arrays per candidate (and `num_actions`) is then this one. Callers that
# pass feature arrays use it where it exists, else serving_default (rlops.train.by_id).
FEATURES_SIGNATURE = "serving_features"
ITEM_TABLE = "item_table"  # policy_specs.json: the baked item table's num_rows, sha256, id_dtype


def features_signature(signatures: object) -> str:
    """The name of the signature that takes raw feature arrays (see FEATURES_SIGNATURE)."""
    return FEATURES_SIGNATURE if FEATURES_SIGNATURE in signatures else "serving_default"  # type: ignore[operator]
