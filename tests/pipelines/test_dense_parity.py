"""Each dense pipeline against transformers' own processor + model + post_process_* on the same tiny
checkpoint and image. Tolerances:
- segmentation: labels equal on >= 99.9% of pixels (in practice all of them);
- normals: transformers does not re-normalise after the resize, so the reference is re-normalised here;
  then |ours - ref| <= 1e-4 on 99.9% of pixels and <= 1e-3 on all but near-zero interpolated vectors;
- pointmap: |ours - ref| <= 1e-5 * max|ref| + 1e-6 everywhere (bilinear cv2 vs torch, float32);
- matting: alpha and foreground within 1e-4 (cv2 and torch round bilinear weights differently); the green composite within 1 grey level (torchvision
  truncates float -> uint8, we round).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sapiens2_demo.pipelines import dense
from sapiens2_demo.render.matting import CHROMA_GREEN, MattingAnnotator


def _reference(tiny_dir, task):
    import transformers
    from transformers import Sapiens2ImageProcessor

    from sapiens2_demo.models.registry import TASKS, checkpoint

    path = tiny_dir / checkpoint(task, TASKS[task].sizes[0]).dirname
    model = getattr(transformers, TASKS[task].auto_class).from_pretrained(path, local_files_only=True).eval()
    return model, Sapiens2ImageProcessor.from_pretrained(path, local_files_only=True)


def _run(model, processor, image, do_pad):
    inputs = processor(images=image, return_tensors="pt", do_pad=do_pad)
    with torch.inference_mode():
        return model(**inputs)


@pytest.fixture(scope="module", params=["square", "landscape"])
def image(request, person_image):
    # both are padded for normals/pointmap (neither is 4:3); the landscape one heavily, top and bottom
    return person_image.copy() if request.param == "square" else person_image[100:400].copy()


def test_segmentation_matches_transformers(tiny_dir, manager, image):
    model, processor = _reference(tiny_dir, "seg")
    outputs = _run(model, processor, image, do_pad=False)
    ref = processor.post_process_semantic_segmentation(outputs, target_sizes=[image.shape[:2]])[0].numpy()
    ours = dense.segment(image, manager).labels
    assert ours.shape == ref.shape == image.shape[:2]
    assert len(np.unique(ref)) > 3  # random weights still give a mixed label map: the test has teeth
    assert (ours == ref).mean() >= 0.999


def test_normals_match_renormalised_transformers(tiny_dir, manager, image):
    model, processor = _reference(tiny_dir, "normal")
    outputs = _run(model, processor, image, do_pad=True)
    ref = processor.post_process_normal_estimation(outputs, source_sizes=[image.shape[:2]])[0]["normals"]
    ref = F.normalize(ref, dim=0, eps=1e-8).permute(1, 2, 0).numpy()
    ours = dense.estimate_normals(image, manager).normals
    assert ours.shape == ref.shape == (*image.shape[:2], 3)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=-1), 1.0, atol=1e-5)
    error = np.abs(ours - ref).max(axis=-1)
    assert np.quantile(error, 0.999) <= 1e-4
    assert error.max() <= 1e-3 or (error > 1e-3).mean() < 1e-4


def test_pointmap_matches_transformers(tiny_dir, manager, image):
    model, processor = _reference(tiny_dir, "pointmap")
    outputs = _run(model, processor, image, do_pad=True)
    ref = processor.post_process_pointmap_estimation(outputs, source_sizes=[image.shape[:2]])[0]["pointmap"]
    ref = ref.permute(1, 2, 0).numpy()
    result = dense.estimate_pointmap(image, manager)
    assert result.points.shape == ref.shape == (*image.shape[:2], 3)
    np.testing.assert_allclose(result.points, ref, rtol=0, atol=1e-5 * np.abs(ref).max() + 1e-6)
    assert result.scale == pytest.approx(float(outputs.scales[0, 0]), rel=1e-6)
    assert result.focal_length == pytest.approx(processor.size["width"] / result.scale, rel=1e-6)


def test_matting_matches_transformers(tiny_dir, manager, image):
    model, processor = _reference(tiny_dir, "matting")
    outputs = _run(model, processor, image, do_pad=False)
    green = np.broadcast_to(np.asarray(CHROMA_GREEN, np.uint8), image.shape).copy()
    ref = processor.post_process_image_matting(outputs, target_sizes=[image.shape[:2]], backgrounds=green)[0]
    result = dense.estimate_matting(image, manager)
    np.testing.assert_allclose(result.alpha, ref["alpha"][0].numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(result.foreground, ref["foreground"].permute(1, 2, 0).numpy(), atol=1e-4, rtol=0)
    composite = MattingAnnotator(CHROMA_GREEN).annotate(image, result).astype(int)
    assert np.abs(composite - ref["composite"].permute(1, 2, 0).numpy().astype(int)).max() <= 1
