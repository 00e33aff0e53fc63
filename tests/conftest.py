"""Test setup shared by the whole suite.

Splits the host CPU into two logical devices before TensorFlow initializes, so strategy tests
can build a two-replica MirroredStrategy on a CPU-only machine. Everything else runs on CPU:0
as usual.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "0")  # see rlops/__init__.py

import tensorflow as tf  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:  # already initialized by an earlier import
    pass
