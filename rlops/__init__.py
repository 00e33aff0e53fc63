"""rlops: TFX / Kubeflow Pipelines components and TF2 agents for reinforcement learning."""
import os

# Keras mode, chosen deliberately: rlops builds no tf.keras models (networks are tf.Modules,
# optimizers come from tf_keras), but TensorFlow Probability 0.24 -- the newest that supports
# TF 2.16 -- only imports in Keras 3 mode, while tensorflow_transform (pulled in by TFX) flips
# TensorFlow to legacy Keras 2 unless TF_USE_LEGACY_KERAS is already set. Setting it first
# keeps TFP importable in pipeline processes. The Dockerfile sets the same.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "0")

__version__ = "0.1.0"
