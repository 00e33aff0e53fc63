"""rlops: TFX / Kubeflow Pipelines components for reinforcement learning."""
from setuptools import find_packages, setup

setup(
    name="rlops",
    version="0.1.0",
    description="TFX / KFP components and TF2 agents for reinforcement learning in production.",
    python_requires=">=3.10,<3.11",
    packages=find_packages(include=["rlops", "rlops.*"]),
    package_data={"rlops.pipelines": ["configs/*.yaml"], "rlops.components.kfp": ["specs/*.yaml"]},
    install_requires=[
        "tensorflow==2.16.2",
        "tensorflow-probability==0.24.0",
        "tf-keras==2.16.0",
        "numpy==1.26.4",
        "gymnasium==1.4.0",
        "scikit-learn",
        "pyyaml",
    ],
    extras_require={
        "pipelines": [
            "tfx[kfp]==1.16.0",
            "kfp==2.5.0",
            "apache-beam[gcp]==2.74.0",
            "dill==0.3.1.1",
            "ml-metadata==1.16.0",
            "tensorflow-data-validation==1.16.1",
            "google-cloud-aiplatform==1.165.1",
        ],
        # MuJoCo environments for benchmarks/ppo_mujoco.py and its tests (HalfCheetah-v5, Hopper-v5)
        "mujoco": ["mujoco==3.17.0", "gymnasium[mujoco]==1.4.0"],
        # vector_env="envpool": envpool 0.8.4 is the newest with a Python 3.10 wheel; it imports gym 0.26
        "envpool": ["envpool==0.8.4", "gym==0.26.2", "dm-env==1.6"],
    },
    entry_points={"console_scripts": ["rlops=rlops.pipelines.cli:main"]},
)
