"""GlobalAndArmDotProductNetwork: per-arm scores are the dot product of a global and an arm tower
(plus a linear score of each side), checked against a numpy forward pass of its own weights."""

import numpy as np
import pytest
import tensorflow as tf

from rlops.agents.bandits.dot_product import GlobalAndArmDotProductNetwork

G, A, K, B = 6, 5, 7, 9


def _spec() -> dict:
    return {"global": tf.TensorSpec([G], tf.float32), "per_arm": tf.TensorSpec([K, A], tf.float32)}


def _observation(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "global": rng.normal(size=(B, G)).astype(np.float32),
        "per_arm": rng.normal(size=(B, K, A)).astype(np.float32),
    }


def _tower(mlp, x: np.ndarray) -> np.ndarray:
    """The tower in numpy: ReLU hidden layers, then a linear output layer."""
    for layer in mlp.layers:
        x = np.maximum(x @ layer.kernel.numpy() + layer.bias.numpy(), 0.0)
    return x @ mlp.output_layer.kernel.numpy() + mlp.output_layer.bias.numpy()


def _dense(layer, x: np.ndarray) -> np.ndarray:
    return x @ layer.kernel.numpy() + layer.bias.numpy()


@pytest.mark.parametrize("layers", [(4,), (16, 4)])
def test_scores_are_the_dot_product_of_the_two_towers(layers):
    net = GlobalAndArmDotProductNetwork(_spec(), global_layers=layers, arm_layers=(3, layers[-1]), with_bias=False)
    obs = _observation()
    # Non-trivial biases, so the check sees them (they start at 0).
    for v in net.trainable_variables:
        if "bias" in v.name:
            v.assign(np.random.default_rng(1).normal(size=v.shape).astype(np.float32))
    g = _tower(net.global_tower, obs["global"])  # [B, E]
    arms = _tower(net.arm_tower, obs["per_arm"].reshape(-1, A)).reshape(B, K, -1)  # [B, K, E]
    expected = np.einsum("be,bke->bk", g, arms)
    np.testing.assert_allclose(net(obs).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert g.shape[1] == layers[-1]


def test_bias_adds_a_linear_score_of_each_side():
    net = GlobalAndArmDotProductNetwork(_spec(), global_layers=(4,), arm_layers=(4,))
    obs = _observation(2)
    g = _tower(net.global_tower, obs["global"])
    arms = _tower(net.arm_tower, obs["per_arm"].reshape(-1, A)).reshape(B, K, -1)
    arm_bias = _dense(net.arm_bias, obs["per_arm"].reshape(-1, A)).reshape(B, K)
    global_bias = _dense(net.global_bias, obs["global"])  # [B, 1]: the same for every arm
    expected = np.einsum("be,bke->bk", g, arms) + arm_bias + global_bias
    np.testing.assert_allclose(net(obs).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_scores_any_number_of_arms():
    """Training scores only the chosen arm (K = 1); serving scores every candidate."""
    net = GlobalAndArmDotProductNetwork(_spec(), global_layers=(4,), arm_layers=(4,))
    obs = _observation(3)
    full = net(obs).numpy()
    one = net({"global": obs["global"], "per_arm": obs["per_arm"][:, 2:3]}).numpy()
    assert full.shape == (B, K) and one.shape == (B, 1)
    np.testing.assert_allclose(one[:, 0], full[:, 2], rtol=1e-5, atol=1e-6)


def test_tower_sizes_must_meet_in_one_embedding():
    with pytest.raises(ValueError, match="end with the same size"):
        GlobalAndArmDotProductNetwork(_spec(), global_layers=(8,), arm_layers=(4,))
    with pytest.raises(ValueError, match="at least one layer"):
        GlobalAndArmDotProductNetwork(_spec(), global_layers=(), arm_layers=(4,))
