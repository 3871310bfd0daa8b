"""Downloads for a processed video, one writer per format, all written atomically.

| task | file | contents |
|---|---|---|
| pose | pose_frames.jsonl | one JSON line per processed frame: `frame` (index in the source), `time` (s), `image_size` [H,W], `people`: [{`track_id` (-1 = not tracked yet), `bbox` [x1,y1,x2,y2], `bbox_score`, `keypoints` [[x,y]x308], `keypoint_scores` [308]}] |
| pose | pose_coco17.jsonl | one JSON line per frame: `frame`, `time`, and the image tab's COCO-17 document (`annotations` with `track_id`) |
| pose | pose_coco_wholebody.jsonl | the same with the image tab's COCO-WholeBody (133 keypoints) document |
| segment | body_parts_labels.zip | `frame_000123.png` per processed frame: 8-bit class ids 0-28 (0 = background), lossless |
| pointmap | depth_mm.zip | `frame_000123.png` per frame: 16-bit depth in millimetres (0 = background/invalid), lossless |
| normals | normals_f16.zip | on request: `frame_000123.npy` per frame, float16 (H, W, 3) unit normals x y z |
| matting | matting_alpha.mp4, matting_transparent.webm | the alpha matte as a grey H.264 video; the cut-out as VP9 WebM with alpha |

Every writer writes to a temporary name and renames it on `close()`; `abort()` removes it, so a cancelled or failed
run never leaves a file that looks complete. Frame numbers in names are the source frame indices.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from ..util import partial_path, png_bytes


class _AtomicFile:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = partial_path(self.path)

    def close(self) -> None:
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.tmp.unlink(missing_ok=True)


class JsonLinesWriter(_AtomicFile):
    def __init__(self, path):
        super().__init__(path)
        self._file = open(self.tmp, "w", encoding="utf-8")

    def add(self, document: dict) -> None:
        self._file.write(json.dumps(document, allow_nan=False, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()
        super().close()

    def abort(self) -> None:
        self._file.close()
        super().abort()


class FrameZipWriter(_AtomicFile):
    """A zip of one file per frame (PNGs are stored, already compressed; .npy deflated)."""

    def __init__(self, path):
        super().__init__(path)
        self._zip = zipfile.ZipFile(self.tmp, "w")

    def add_png(self, index: int, array: np.ndarray) -> None:
        self._zip.writestr(f"frame_{index:06d}.png", png_bytes(array), compress_type=zipfile.ZIP_STORED)

    def add_npy(self, index: int, array: np.ndarray) -> None:
        buffer = io.BytesIO()
        np.save(buffer, array)
        self._zip.writestr(f"frame_{index:06d}.npy", buffer.getvalue(), compress_type=zipfile.ZIP_DEFLATED)

    def close(self) -> None:
        self._zip.close()
        super().close()

    def abort(self) -> None:
        self._zip.close()
        super().abort()


def pose_frame_document(index: int, time: float, result) -> dict:
    ids = result.track_ids if result.track_ids is not None else np.full(result.num_people, -1)
    people = [{"track_id": int(ids[p]), "bbox": [round(float(v), 2) for v in result.boxes[p]],
               "bbox_score": round(float(result.box_scores[p]), 4),
               "keypoints": np.round(result.keypoints[p].astype(np.float64), 2).tolist(),
               "keypoint_scores": np.round(result.keypoint_scores[p].astype(np.float64), 4).tolist()}
              for p in range(result.num_people)]
    return {"frame": int(index), "time": round(float(time), 6), "image_size": list(result.image_size),
            "people": people}


class TaskVideoExport:
    """The downloads of one task on one video: named writers, `add(index, time, frame, result)` per processed
    frame, then `close()` (renamed into place; returns the paths) or `abort()` (removed)."""

    def __init__(self, writers: dict):
        self.writers = writers

    def add(self, index: int, time: float, frame: np.ndarray, result) -> None:
        raise NotImplementedError

    def close(self) -> list[Path]:
        for writer in self.writers.values():
            writer.close()
        return [writer.path for writer in self.writers.values()]

    def abort(self) -> None:
        for writer in self.writers.values():
            writer.abort()


class PoseVideoExport(TaskVideoExport):
    def __init__(self, folder: Path, *, keypoint_threshold: float = 0.3, **_):
        super().__init__({"frames": JsonLinesWriter(Path(folder) / "pose_frames.jsonl"),
                          "coco": JsonLinesWriter(Path(folder) / "pose_coco17.jsonl"),
                          "wholebody": JsonLinesWriter(Path(folder) / "pose_coco_wholebody.jsonl")})
        self.keypoint_threshold = keypoint_threshold

    def add(self, index, time, frame, result) -> None:
        from .pose_formats import to_coco17
        from .pose_wholebody import to_coco_wholebody

        self.writers["frames"].add(pose_frame_document(index, time, result))
        ids = result.track_ids
        for writer, document in (("coco", to_coco17(result, self.keypoint_threshold)),
                                 ("wholebody", to_coco_wholebody(result, self.keypoint_threshold))):
            for person, annotation in enumerate(document.get("annotations", [])):
                annotation["track_id"] = int(ids[person]) if ids is not None else -1
            self.writers[writer].add({"frame": int(index), "time": round(float(time), 6), **document})


class LabelsVideoExport(TaskVideoExport):
    def __init__(self, folder: Path, **_):
        super().__init__({"labels": FrameZipWriter(Path(folder) / "body_parts_labels.zip")})

    def add(self, index, time, frame, result) -> None:
        self.writers["labels"].add_png(index, result.labels)


class DepthVideoExport(TaskVideoExport):
    def __init__(self, folder: Path, **_):
        super().__init__({"depth": FrameZipWriter(Path(folder) / "depth_mm.zip")})

    def add(self, index, time, frame, result) -> None:
        from .image import depth_millimetres

        self.writers["depth"].add_png(index, depth_millimetres(result))


class NormalsVideoExport(TaskVideoExport):
    def __init__(self, folder: Path, **_):
        super().__init__({"normals": FrameZipWriter(Path(folder) / "normals_f16.zip")})

    def add(self, index, time, frame, result) -> None:
        normals = result.normals if result.mask is None else np.where(result.mask[..., None], result.normals, 0)
        self.writers["normals"].add_npy(index, normals.astype(np.float16))


class MattingVideoExport(TaskVideoExport):
    def __init__(self, folder: Path, *, fps: float, **_):
        from ..media.video import VideoSink

        super().__init__({"alpha": VideoSink(Path(folder) / "matting_alpha.mp4", fps=fps),
                          "rgba": VideoSink(Path(folder) / "matting_transparent.webm", fps=fps, codec="vp9-alpha")})

    def add(self, index, time, frame, result) -> None:
        from ..render.matting import alpha_image, rgba_cutout

        self.writers["alpha"].write(np.repeat(alpha_image(result)[..., None], 3, axis=2), time)
        self.writers["rgba"].write(rgba_cutout(frame, result), time)
