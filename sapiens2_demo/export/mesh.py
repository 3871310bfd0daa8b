"""The person as a coloured surface mesh: the pointmap's pixel grid triangulated, tears cut at depth jumps.

Grid. The pixel grid is sampled every `s` pixels, with the smallest `s` (starting from
ceil(sqrt(H * W * 2 / max_faces))) whose (rows - 1) * (cols - 1) cells, two triangles each, fit in
`max_faces`. Vertex colours are the image at the sampled pixels (RGBA, alpha 255).

Dropped triangles. Any triangle with a vertex that is invalid (non-finite, z <= 0) or outside the mask, and
any triangle with an edge that spans a depth jump:

    |P_a - P_b| > jump_ratio * alpha * g * min(z_a, z_b)

where `g` is the edge's length in grid steps (1, or sqrt(2) for the diagonal) and `alpha` the angle one grid
step subtends, measured from the pointmap itself as the median change of the ray direction (x/z along rows,
y/z along columns) between valid neighbours. So `alpha * z` is the footprint of one grid step at the nearer
end's depth, and the rule keeps any surface seen at less than arccos(1 / jump_ratio) from face-on (about
78.5 degrees for the default 5), whatever the stride, focal length or distance, while cutting any depth
change steeper than `jump_ratio` footprints per grid step. Measured on synthetic pinhole maps (f = 500,
200 x 300, rays up to ~17 degrees off-axis) for ratios 2-20:
  - plane tilted 60 degrees (rays up to ~77 degrees off its normal): 49 % of faces kept at 2, 82 % at 3,
    98.1 % at 4, 100 % at 5 and above; tilted 70 degrees (rays up to ~87): 66 % at 4, 75 % at 5, 93 % at 10;
  - sharp steps 2 -> 3 m (250 footprints) and 2.5 -> 2.6 m (20 footprints): cut at every ratio 3-10;
  - a 2.5 -> 2.6 m step smoothed over 5 px (4 footprints a step): cut at 3-4, bridged at 5 and above;
    smoothed over 3 px (6.7 a step): cut up to 6, bridged at 8.
5 is the smallest of these ratios that keeps the 60-degree plane whole; larger ones bridge more of the gaps that the
model smooths over a few pixels (arm in front of the torso), smaller ones eat steep body sides.

Frames. `pointmap_mesh` keeps the camera frame (x right, y down, z forward, metres) with faces wound to
face the camera; `write_mesh_glb` turns it into the glTF frame (x, -y, -z: y up, the viewer on +z). That
flip is a 180-degree rotation about x, so the winding, and with it the facing, is kept.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from .bounds import remember
from .image import NothingToExport
from .pointcloud import to_gltf_frame

DEFAULT_MAX_FACES = 300_000
DEFAULT_JUMP_RATIO = 5.0


def grid_stride(height: int, width: int, max_faces: int) -> int:
    """The smallest stride from ceil(sqrt(H * W * 2 / max_faces)) up whose grid has <= max_faces triangles
    (that start capped so at least one cell is left)."""
    if max_faces < 2:
        raise ValueError("max_faces must be at least 2 (one grid cell)")
    stride = max(1, math.ceil(math.sqrt(height * width * 2 / max_faces)))
    stride = min(stride, max(1, min(height, width) - 1))  # tiny budgets: keep two rows and columns (>= 1 cell)
    while 2 * (len(range(0, height, stride)) - 1) * (len(range(0, width, stride)) - 1) > max_faces:
        stride += 1  # the ceil of each side can overshoot the estimate by a row or column
    return stride


def _step_angle(points: np.ndarray, valid: np.ndarray) -> float:
    """The angle (in tan units) one grid step subtends: median ray-direction change between valid neighbours.

    Ray directions (x/z, y/z) do not depend on depth, so slanted surfaces do not bias it the way edge
    lengths would. Falls back to the median edge length / depth when the rays are degenerate."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ray = points[..., :2] / points[..., 2:3]
    along_rows = np.abs(np.diff(ray[..., 0], axis=1))[valid[:, 1:] & valid[:, :-1]]
    along_cols = np.abs(np.diff(ray[..., 1], axis=0))[valid[1:, :] & valid[:-1, :]]
    steps = np.concatenate([along_rows, along_cols])
    angle = float(np.median(steps)) if steps.size else math.nan
    if math.isfinite(angle) and angle > 0:
        return angle
    pair = valid[:, 1:] & valid[:, :-1]
    lengths = np.linalg.norm(np.diff(points, axis=1), axis=2)[pair] / points[:, :-1, 2][pair]
    return float(np.median(lengths)) if lengths.size else math.nan


def _edge_ok(a: np.ndarray, b: np.ndarray, limit: float) -> np.ndarray:
    """True where the edge a-b (arrays of points) is no longer than `limit` x the nearer depth."""
    with np.errstate(invalid="ignore"):
        step = a - b
        reach = limit * np.minimum(a[..., 2], b[..., 2])
        # squared lengths by einsum: np.linalg.norm's reduction over a last axis of 3 is ~5x slower
        return (np.einsum("...i,...i->...", step, step) <= reach * reach) & (reach >= 0)


def pointmap_mesh(points: np.ndarray, image: np.ndarray, mask: np.ndarray | None = None,
                  max_faces: int = DEFAULT_MAX_FACES, jump_ratio: float = DEFAULT_JUMP_RATIO):
    """A trimesh.Trimesh in the camera frame over the valid, masked pointmap; see the module docstring."""
    points = np.asarray(points, dtype=np.float32)
    image = np.asarray(image)[..., :3]
    if points.ndim != 3 or points.shape[2] != 3:
        raise ValueError(f"points must be (H, W, 3), got {points.shape}")
    height, width = points.shape[:2]
    if image.shape[:2] != (height, width):
        raise ValueError(f"image {image.shape[:2]} and pointmap {points.shape[:2]} differ in size")
    if mask is not None and np.shape(mask) != (height, width):
        raise ValueError(f"mask {np.shape(mask)} does not match the map {(height, width)}")

    stride = grid_stride(height, width, max_faces)
    return grid_mesh(points[::stride, ::stride], image, stride, mask, jump_ratio)


def result_mesh(result, image: np.ndarray, mask: np.ndarray | None = None, max_faces: int = DEFAULT_MAX_FACES,
                jump_ratio: float = DEFAULT_JUMP_RATIO):
    """`pointmap_mesh` of a PointmapResult: over its points, or a light answer's grid (the same vertices, taken
    where the model ran for this `max_faces`)."""
    if result.points is not None:
        return pointmap_mesh(result.points, image, mask, max_faces, jump_ratio)
    height, width = result.depth_mm.shape
    image = np.asarray(image)[..., :3]
    if image.shape[:2] != (height, width) or (mask is not None and np.shape(mask) != (height, width)):
        raise ValueError(f"image {image.shape[:2]} or mask {np.shape(mask)} does not match the map {(height, width)}")
    stride = grid_stride(height, width, max_faces)
    if stride != result.grid_stride:
        raise ValueError(f"This answer's mesh grid is every {result.grid_stride} px; {max_faces} faces need every "
                         f"{stride} px (ask for the raw data, or the max_faces it was made for).")
    return grid_mesh(result.grid, image, stride, mask, jump_ratio)


def grid_mesh(grid: np.ndarray, image: np.ndarray, stride: int, mask: np.ndarray | None = None,
              jump_ratio: float = DEFAULT_JUMP_RATIO):
    """The mesh over `grid`, the points every `stride` pixels of the image (`image` and `mask` at full size)."""
    import trimesh

    grid = np.ascontiguousarray(grid, dtype=np.float32)
    colours = image[::stride, ::stride]
    if colours.shape[:2] != grid.shape[:2]:
        raise ValueError(f"a grid of {grid.shape[:2]} is not this image's every {stride} px {colours.shape[:2]}")
    valid = np.isfinite(grid).all(axis=2)
    valid[valid] = grid[valid][:, 2] > 0
    if mask is not None:
        valid &= np.asarray(mask, dtype=bool)[::stride, ::stride]

    # Cell corners: a = (i, j), b = (i, j + 1), c = (i + 1, j), d = (i + 1, j + 1); triangles a-c-b and b-c-d
    # wind so that, with y down and z forward, their normals point at the camera (-z).
    a, b, c, d = grid[:-1, :-1], grid[:-1, 1:], grid[1:, :-1], grid[1:, 1:]
    keep_acb = valid[:-1, :-1] & valid[1:, :-1] & valid[:-1, 1:]
    keep_bcd = valid[:-1, 1:] & valid[1:, :-1] & valid[1:, 1:]
    angle = _step_angle(grid, valid)
    if math.isfinite(angle):
        straight, diagonal = jump_ratio * angle, jump_ratio * angle * math.sqrt(2)
        diagonal_ok = _edge_ok(b, c, diagonal)
        keep_acb &= _edge_ok(a, c, straight) & _edge_ok(a, b, straight) & diagonal_ok
        keep_bcd &= _edge_ok(c, d, straight) & _edge_ok(b, d, straight) & diagonal_ok

    cols = grid.shape[1]
    top_left = (np.arange(grid.shape[0] - 1)[:, None] * cols + np.arange(cols - 1)[None, :])
    ia, ib, ic, id_ = top_left, top_left + 1, top_left + cols, top_left + cols + 1
    faces = np.concatenate([np.stack([ia, ic, ib], axis=-1)[keep_acb], np.stack([ib, ic, id_], axis=-1)[keep_bcd]])
    if faces.shape[0] == 0:
        raise NothingToExport("No part of the person has a valid, continuous depth, so there is no mesh to save.")

    used = np.unique(faces)  # drop unreferenced vertices by re-indexing onto the used ones
    remap = np.full(grid.shape[0] * cols, -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    vertex_colours = np.concatenate([colours.reshape(-1, 3)[used].astype(np.uint8),
                                     np.full((used.size, 1), 255, np.uint8)], axis=1)
    return trimesh.Trimesh(vertices=grid.reshape(-1, 3)[used], faces=remap[faces],
                           vertex_colors=vertex_colours, process=False)


def write_mesh_glb(mesh, folder: str | Path, name: str = "person_mesh.glb") -> Path:
    """The mesh in the glTF frame (y up, facing +z) with its vertex colours, written atomically."""
    import trimesh

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    partial = folder / f".{name}.partial"
    flipped = trimesh.Trimesh(vertices=to_gltf_frame(np.asarray(mesh.vertices, dtype=np.float32)),
                              faces=np.asarray(mesh.faces), vertex_colors=mesh.visual.vertex_colors, process=False)
    try:
        partial.write_bytes(trimesh.Scene(flipped).export(file_type="glb"))
        os.replace(partial, path)  # a reader never sees a half-written file
    finally:
        partial.unlink(missing_ok=True)
    return remember(path, flipped.bounds)  # the 3D viewer frames it from these (export/bounds.py)
