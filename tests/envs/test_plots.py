"""Learning-curve helpers: runs smoothed and put on one grid, and the band figure written."""

import numpy as np
import pytest

from rlops.envs.plots import plot_learning_curve_bands, smoothed_on_grid


def test_runs_are_smoothed_and_interpolated_onto_a_shared_grid():
    a = ([10, 20, 30, 40, 50], [0.0, 2.0, 4.0, 6.0, 8.0])
    b = ([15, 25, 35, 45, 55, 65], [1.0, 1.0, 3.0, 3.0, 5.0, 5.0])
    grid, values = smoothed_on_grid([a, b], window=2, points=5)
    # Moving averages: a at steps 20..50 = 1, 3, 5, 7; b at steps 25..65 = 1, 2, 3, 4, 5.
    np.testing.assert_allclose(grid, np.linspace(25, 50, 5))
    np.testing.assert_allclose(values[0], np.interp(grid, [20, 30, 40, 50], [1, 3, 5, 7]))
    np.testing.assert_allclose(values[1], np.interp(grid, [25, 35, 45, 55, 65], [1, 2, 3, 4, 5]))
    with pytest.raises(ValueError, match="fewer than the window"):
        smoothed_on_grid([a], window=6)


def test_band_figure_is_written(tmp_path):
    rng = np.random.default_rng(0)
    runs = [(np.arange(1, 101) * 100, np.cumsum(rng.normal(1, 1, 100))) for _ in range(3)]
    path = plot_learning_curve_bands(
        {"a": runs, "b": runs[:2]}, str(tmp_path / "bands.png"), "t", references={"published 50": 50.0}
    )
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
