"""A result in a few numbers (people and keypoint counts, part shares, depth range, ...): what an agent reads
beside the picture (the MCP tools), as JSON-ready plain values."""

from __future__ import annotations

import numpy as np

from ..results import (
    FeaturesResult,
    MattingResult,
    NormalsResult,
    PointmapResult,
    PoseResult,
    SegmentationResult,
    codes_of,
)

KEYPOINT_THRESHOLD = 0.3  # the drawing's default: a keypoint scored above it is "visible"


def summarize(result, image_hw: tuple[int, int]) -> dict:
    """`result` (a pipeline's) summed up; the image's (height, width) for the shares."""
    height, width = (int(v) for v in image_hw)
    summary: dict = {"image_size": {"width": width, "height": height}}
    pixels = max(height * width, 1)
    if isinstance(result, PoseResult):
        people = len(result.boxes)
        summary.update(people=people, keypoints_per_person=int(result.keypoints.shape[1]) if people else 0,
                       people_boxes_xyxy=[[round(float(v)) for v in box] for box in result.boxes],
                       visible_keypoints_per_person=[int((scores > KEYPOINT_THRESHOLD).sum())
                                                     for scores in result.keypoint_scores],
                       visible_means=f"keypoint score above {KEYPOINT_THRESHOLD}")
    elif isinstance(result, SegmentationResult):
        from ..render.parts import legend

        entries = sorted(legend(result), key=lambda entry: -entry.share)
        summary.update(person_percent=round(100 * sum(entry.share for entry in entries), 2),
                       parts_percent={entry.name.replace("_", " "): round(100 * entry.share, 2) for entry in entries})
    elif isinstance(result, NormalsResult):
        summary.update(person_percent=_percent(result.mask, pixels))
    elif isinstance(result, PointmapResult):
        summary.update(person_percent=_percent(result.mask, pixels),
                       focal_length_px_at_model_input=round(float(result.focal_length), 1))
        from ..render.depth import SUMMARY_PERCENTILES, depth_percentiles

        percentiles = depth_percentiles(result, SUMMARY_PERCENTILES, result.mask)  # the render asked for these too
        if percentiles is not None:
            low, median, high = percentiles
            summary["depth_m"] = {"p1": round(float(low), 3), "median": round(float(median), 3),
                                  "p99": round(float(high), 3)}
    elif isinstance(result, MattingResult):
        coded = codes_of(result, "alpha")  # a light answer's codes: v > 0.5 is code >= 128, no decode
        above = result.alpha > 0.5 if coded is None else coded.codes >= 128
        summary.update(person_percent=round(100 * float(np.count_nonzero(above)) / max(above.size, 1), 2))
    elif isinstance(result, FeaturesResult):
        summary.update(embedding_size=int(result.embedding.shape[0]), patch_grid=list(result.patches.shape[:2]))
    return summary


def _percent(mask, pixels: int):
    """The share of the image a mask covers, in %; None where there is no mask (background kept)."""
    return None if mask is None else round(100 * float(np.count_nonzero(mask)) / pixels, 2)
