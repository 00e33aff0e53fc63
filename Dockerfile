# The rlops image: every step of a compiled Vertex AI pipeline, the Vertex AI custom training job
# and the KFP component specs run in it.
#
#   docker build -t rlops:0.1.0 .                                   # CPU and GPU steps (the default `rlops compile --image`)
#   docker build --target dataflow -t rlops:0.1.0-dataflow .        # Dataflow workers for ExperienceGen
#   docker build -f Dockerfile.tpu -t rlops:0.1.0-tpu .             # TPU worker pools of a custom training job
#
# Vertex AI pulls from a registry: tag and push as REGION-docker.pkg.dev/PROJECT/REPO/rlops:0.1.0
# and pass that to `rlops compile --image` (README, "Run on Vertex AI").
#
# GPU note: TFX's 1.16 image is already built on a CUDA base with the CUDA/cuDNN libraries its
# TensorFlow uses, so the same image runs CPU and GPU steps (the host only needs an NVIDIA driver,
# which Vertex AI GPU machines have). Installing tensorflow[and-cuda] on top -- this file's old
# GPU=true build argument -- added a second CUDA stack from pip wheels: gigabytes larger, and two
# copies of libcudnn for TensorFlow to choose between. A digest-pinned image (...@sha256:...) is
# fine for steps; Dataflow and TPU pools then need their own images named explicitly (see
# dataflow.sdk_container_image / custom_job.tpu_image).

# Beam's SDK harness (the `boot` entrypoint Dataflow workers start), same Beam and Python as below.
FROM apache/beam_python3.10_sdk:2.74.0 AS beam

FROM gcr.io/tfx-oss-public/tfx:1.16.0 AS rlops

# rlops/quiet.py explains: TFP 0.24 imports only in Keras 3 mode, and TFX's tensorflow_transform
# would flip TensorFlow to legacy Keras unless this is set first.
ENV TF_USE_LEGACY_KERAS=0 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/rlops
# The verified pins first (their layer is cached while only rlops' code changes); test tools stay out.
COPY requirements.txt ./
RUN sed '/^# test tools/,$d' requirements.txt > /tmp/requirements.txt \
 && python -m pip install -r /tmp/requirements.txt

COPY pyproject.toml ./
COPY rlops ./rlops
RUN python -m pip install --no-deps . \
 && python -c "import rlops.components.trainer.executor, rlops.components.kfp.entrypoint, rlops.pipelines.cli"

# The TFX v2 container launcher: what KubeflowV2DagRunner puts in every step's command anyway,
# so `docker run IMAGE --executor_class_path ... --json_serialized_invocation_args ...` works too.
ENTRYPOINT ["python", "-m", "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"]

# Dataflow workers: the same Python environment, started by Beam's boot binary.
FROM rlops AS dataflow
COPY --from=beam /opt/apache/beam /opt/apache/beam
ENTRYPOINT ["/opt/apache/beam/boot"]

# The default build target (listed last).
FROM rlops
