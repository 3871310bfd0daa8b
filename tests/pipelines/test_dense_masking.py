"""The tiny pipelines end to end: the body-part mask cleans normals and depth, in pictures and files."""

import numpy as np
import trimesh
from PIL import Image

from sapiens2_demo.export import image as export
from sapiens2_demo.pipelines import dense
from sapiens2_demo.render.depth import BACKGROUND, DepthAnnotator
from sapiens2_demo.render.normals import NormalsAnnotator


def test_segmentation_mask_cleans_normals_and_depth(manager, person_image, tmp_path):
    image = person_image.copy()
    seg = dense.segment(image, manager)
    mask = seg.foreground
    assert 0 < mask.sum() < mask.size  # random weights: some person, some background

    normals = dense.estimate_normals(image, manager, mask=mask)
    drawn = NormalsAnnotator().annotate(image, normals)
    assert (drawn[~mask] == 0).all() and (drawn[mask] != 0).any()
    kept = NormalsAnnotator(background="image").annotate(image, normals)
    np.testing.assert_array_equal(kept[~mask], image[~mask])

    points = dense.estimate_pointmap(image, manager, mask=mask)
    depth = DepthAnnotator().annotate(image, points)
    assert (depth[~mask] == BACKGROUND).all()
    valid = mask & np.isfinite(points.depth) & (points.depth > 0)
    with Image.open(export.write_depth_png(points, tmp_path)) as png:
        mm = np.asarray(png)
    assert ((mm > 0) == valid).all()
    cloud = trimesh.load(export.write_ply(points, image, tmp_path, max_points=1000))
    assert len(cloud.vertices) == min(1000, int(valid.sum()))
