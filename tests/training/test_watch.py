"""The TensorBoard slice image, checked against the cubes it shows."""

import numpy as np

from deepdensity.training.watch import UPSCALE, slice_grid


def test_slice_grid_puts_each_cubes_central_slice_beside_its_rendering():
    rng = np.random.default_rng(0)
    cubes = rng.random((2, 6, 6, 6, 1))
    rendered = cubes * 0.5
    grid = slice_grid(cubes, rendered)[..., 0]
    assert grid.shape == (2 * (6 + 1) * UPSCALE, (6 + 1 + 6) * UPSCALE)
    for r in range(2):
        top = cubes[r, 3].max()
        left = grid[r * 7 * UPSCALE : (r * 7 + 6) * UPSCALE : UPSCALE, 0 : 6 * UPSCALE : UPSCALE]
        right = grid[r * 7 * UPSCALE : (r * 7 + 6) * UPSCALE : UPSCALE, 7 * UPSCALE :: UPSCALE]
        np.testing.assert_allclose(left, cubes[r, 3, :, :, 0] / top, rtol=1e-6)
        np.testing.assert_allclose(right, 0.5 * cubes[r, 3, :, :, 0] / top, rtol=1e-6)
    assert grid.min() >= 0 and grid.max() <= 1


def test_slice_grid_clips_a_rendering_brighter_than_its_cube_and_handles_1d():
    cubes = np.ones((1, 4, 1))
    grid = slice_grid(cubes, cubes * 3)[..., 0]
    assert grid.max() == 1.0 and grid.shape == ((1 + 1) * UPSCALE, (4 + 1 + 4) * UPSCALE)
