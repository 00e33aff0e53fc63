"""Time to publish a ~50 MB SavedModel atomically: local disk, and Cloud Storage emulated by
fake-gcs-server (in-memory, on 127.0.0.1) through google-cloud-storage.

    python benchmarks/publish.py [--mb 50] [--repeats 3]

Publish = stage (copy in) -> claim a version -> marker -> make visible -> prune; verification is left
out (it is a separate, model-dependent cost: one fresh TF process). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from _common import emit, peak_rss_mb  # noqa: E402


def build_saved_model(path: str, mb: float) -> int:
    import numpy as np
    import tensorflow as tf

    module = tf.Module()
    module.w = tf.Variable(np.random.default_rng(0).normal(size=int(mb * 2**20 / 4)).astype(np.float32))
    module.f = tf.function(
        lambda x: x * tf.reduce_sum(module.w[:4]), input_signature=[tf.TensorSpec([None], tf.float32)]
    )
    tf.saved_model.save(module, path, signatures={"serving_default": module.f})
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def time_publish(source: str, destination: str, repeats: int, gcs_client=None) -> list[float]:
    from rlops.components.pusher import publish

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        publish.publish(source, destination, verify=None, keep_last=2, gcs_client=gcs_client)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from rlops.testing.storage import emulator_client, gcs_emulator

    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "model")
        size = build_saved_model(source, args.mb)
        local = time_publish(source, os.path.join(tmp, "serving"), args.repeats)
        with gcs_emulator() as endpoint:
            client = emulator_client(endpoint)
            client.create_bucket("bench")
            gcs = time_publish(source, "gs://bench/serving", args.repeats, client)
    emit(
        "publish",
        saved_model_mb=round(size / 2**20, 1),
        repeats=args.repeats,
        local_s_median=round(statistics.median(local), 3),
        gcs_emulator_s_median=round(statistics.median(gcs), 3),
        local_s=[round(t, 3) for t in local],
        gcs_emulator_s=[round(t, 3) for t in gcs],
        gcs_emulator_mb_per_s=round(size / 2**20 / statistics.median(gcs), 1),
        peak_rss_mb=round(peak_rss_mb()),
    )


if __name__ == "__main__":
    main()
