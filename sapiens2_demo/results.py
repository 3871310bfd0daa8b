"""What each pipeline returns: small dataclasses of numpy arrays in original image coordinates.

Renderers and exporters read these and nothing else, so they never touch torch or the model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class PoseResult:
    image_size: tuple[int, int]  # (height, width)
    boxes: np.ndarray  # (N, 4) float32, x1 y1 x2 y2 in image pixels
    box_scores: np.ndarray  # (N,) float32; 1.0 for user boxes and the whole-image fallback
    keypoints: np.ndarray  # (N, K, 2) float32, x y in image pixels
    keypoint_scores: np.ndarray  # (N, K) float32, raw heatmap peaks (may exceed 1)
    notes: list[str] = field(default_factory=list)  # shown to the user, e.g. detector fallback
    track_ids: np.ndarray | None = None  # (N,) int64 on video with tracking; -1 = not (yet) tracked
    # "Lift to 3D": a pose.lift.Pose3DResult (each keypoint in metres, camera frame, from the pointmap of the
    # same image), else None. Typed `object`: this layer does not import pose/.
    lifted: object | None = None
    # video: the boxes followed the previous frame's keypoints (no detector), so the people are the previous
    # frame's, in the same order: their track ids carry over
    followed: bool = False

    @property
    def num_people(self) -> int:
        return int(self.boxes.shape[0])


@dataclass
class SegmentationResult:
    labels: np.ndarray  # (H, W) uint8 class ids, 0 = background
    reused: bool = False  # an earlier request's, from the segmentation cache: no forward ran for it

    @property
    def foreground(self) -> np.ndarray:
        return self.labels > 0


@dataclass(frozen=True)
class CodedMap:
    """A per-pixel map held as the integers an answer's files need (made where the model ran, so the float32 map
    never crosses): value = codes * step + offset, in float32."""

    codes: np.ndarray  # uint8 / uint16
    step: float
    offset: float = 0.0

    def decode(self) -> np.ndarray:
        values = self.codes.astype(np.float32)
        values *= np.float32(self.step)
        if self.offset:
            values += np.float32(self.offset)
        return values


# The codes of a light image answer (no raw data): each the bits of the file it ends in, so that file is written from
# the codes as they are, and every other reader gets the map within half a step (pipelines/device_post.py makes them).
NORMAL_CODE = (1 / 32767.5, -1.0)  # normals16.png's: round((n + 1) * 32767.5), 1.5e-5 a step
UNIT_CODE = (1 / 255, 0.0)  # the 8-bit PNGs': round(v * 255) (matting's alpha and foreground)
DEPTH_MM = 0.001  # depth_mm.png's millimetres: round(z * 1000) clipped to 1-65535, 0 = invalid


_DECODING = threading.Lock()


def _decoded_once(store: dict, key: str, coded: CodedMap) -> np.ndarray:
    """store[key], decoded from `coded` by the first reader: an image request's render and its writers read the
    same maps at once, in threads, and the second waits for the first's decode rather than making its own."""
    decoded = store.get(key)
    if decoded is None:
        with _DECODING:
            decoded = store.get(key)
            if decoded is None:
                decoded = store[key] = coded.decode()
    return decoded


class MapField:
    """A dataclass field for a float32 per-pixel map that may be given as a `CodedMap`: read, it is the float32
    map (decoded on the first read); `codes_of(result, name)` gives the codes."""

    def __set_name__(self, owner, name: str):
        self.name, self.slot = name, f"_{name}"

    def __get__(self, obj, owner=None):
        if obj is None:
            raise AttributeError(self.name)  # no default: the field is required
        value = obj.__dict__[self.slot]
        if not isinstance(value, CodedMap):
            return value
        return _decoded_once(obj.__dict__, f"{self.slot}_decoded", value)

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value
        obj.__dict__.pop(f"{self.slot}_decoded", None)


class _Coded:
    """Results with `MapField`s: pickled (a process boundary) with their codes, not the decoded maps."""

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.endswith("_decoded")}


def codes_of(result, name: str) -> CodedMap | None:
    """The `CodedMap` a result's map field was given, or None (a float32 map)."""
    value = vars(result).get(f"_{name}")
    return value if isinstance(value, CodedMap) else None


def _stored(result, name: str):
    """A field's value as given (a MapField's codes, not its decoded map)."""
    coded = codes_of(result, name)
    return coded if coded is not None else getattr(result, name)


@dataclass
class NormalsResult(_Coded):
    normals: np.ndarray = MapField()  # (H, W, 3) float32 unit vectors, x y z (given coded: NORMAL_CODE)
    mask: np.ndarray | None = None  # (H, W) bool foreground, when background removal was used
    steady: object | None = None  # video "steady over time": the filter's state after this frame (pipelines/steady.py)

    @property
    def normal_codes(self) -> CodedMap | None:
        """The normals as a light answer gave them (normals16.png's codes, NORMAL_CODE), else None."""
        value = vars(self).get("_normals")  # MapField's slot
        return value if isinstance(value, CodedMap) else None


@dataclass
class PointmapResult:
    # (H, W, 3) float32, metric XYZ in metres (camera frame); None in a light answer, which holds `depth_mm` and
    # `grid` instead (the depth PNG's codes, the surface mesh's vertices)
    points: np.ndarray | None
    scale: float  # canonical / actual focal length ratio predicted by the model
    focal_length: float  # fx in model-input pixels = input width / scale
    mask: np.ndarray | None = None  # (H, W) bool foreground, when background removal was used
    steady: object | None = None  # video "steady over time": the filter's state after this frame (pipelines/steady.py)
    depth_mm: np.ndarray | None = None  # (H, W) uint16 millimetres (DEPTH_MM; 0 = invalid), in a light answer
    grid: np.ndarray | None = None  # (h, w, 3) float32: the points every `grid_stride` pixels, in a light answer
    grid_stride: int = 1
    reused: bool = False  # an earlier request's, from the segmentation cache: no forward ran for it

    @property
    def depth(self) -> np.ndarray:
        """(H, W) float32 metres: the points' z, or a light answer's millimetres (0 where invalid)."""
        if self.points is not None:
            return self.points[..., 2]
        return _decoded_once(self.__dict__, "_depth_decoded", CodedMap(self.depth_mm, DEPTH_MM))

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_depth_decoded"}


@dataclass
class MattingResult(_Coded):
    alpha: np.ndarray = MapField()  # (H, W) float32 in [0, 1] (given coded: UNIT_CODE)
    foreground: np.ndarray = MapField()  # (H, W, 3) float32 in [0, 1], premultiplied by alpha (coded: UNIT_CODE)
    # (H, W, 3) uint8: the un-premultiplied foreground, the RGBA PNG's colour, in a light answer (made where the
    # model ran: from 8-bit codes it would lose the colour where alpha is small)
    colour: np.ndarray | None = None


def resolve_mask(result, mask: np.ndarray | None, shape: tuple[int, int],
                 use_result_mask: bool = True) -> np.ndarray | None:
    """The foreground mask to apply: `mask` if given, else the result's own (when allowed), checked
    against the map's (H, W)."""
    if mask is None and use_result_mask:
        mask = getattr(result, "mask", None)
    if mask is None:
        return None
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != tuple(shape):
        raise ValueError(f"mask {mask.shape} does not match the map {tuple(shape)}")
    return mask


@dataclass
class FeaturesResult:
    embedding: np.ndarray  # (C,) float32: the CLS token (pooler_output), a whole-image embedding
    patches: np.ndarray  # (h, w, C) float32: patch tokens in row-major grid order (after CLS and registers)
    input_hw: tuple[int, int]  # model input (height, width) the image was stretched to
    image_hw: tuple[int, int]  # the image's own (height, width)
    mask: np.ndarray | None = None  # (H, W) bool person mask the PCA colours are fitted on, when asked for

    @property
    def grid_hw(self) -> tuple[int, int]:
        return self.patches.shape[0], self.patches.shape[1]

    @property
    def patch_size_px(self) -> tuple[float, float]:
        """(height, width) in image pixels that one patch covers: (H/h, W/w)."""
        (height, width), (h, w) = self.image_hw, self.grid_hw
        return height / h, width / w

    def patch_box(self, i: int, j: int) -> tuple[float, float, float, float]:
        """Image region (x1, y1, x2, y2), continuous pixel coordinates, that patch (i, j) covers."""
        ph, pw = self.patch_size_px
        return j * pw, i * ph, (j + 1) * pw, (i + 1) * ph


def pixel_cells(image_hw: tuple[int, int], grid_hw: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """For every image row and column, the patch row and column its pixel centre falls in:
    i = floor((y + 0.5) * h / H), j = floor((x + 0.5) * w / W)."""
    (height, width), (h, w) = image_hw, grid_hw
    rows = np.minimum(((np.arange(height) + 0.5) * h / height).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(width) + 0.5) * w / width).astype(np.int64), w - 1)
    return rows, cols


@dataclass
class Job:
    """One task over a GPU call's frames: the task's public name, the checkpoint size and the pipeline's options.
    `tolerate_errors`: the caller keeps the exception as that job's answer instead of raising it (the All-tasks
    view keeps the other tasks when one fails)."""

    task: str
    size: str
    options: dict = field(default_factory=dict)
    tolerate_errors: bool = False


@dataclass
class DrawnFrame:
    """A video frame's finished picture, drawn where the model ran (`TaskSpec.draw`): all that comes back."""

    image: np.ndarray  # (H, W, 3) uint8 RGB
    state: Any = None  # on a call's last frame: the drawing's state, where it has one (the depth colour scale)


@dataclass
class TaskOutput:
    """What an image request shows and offers: renders, downloads and notes (no gradio types)."""

    main: np.ndarray | None = None  # the rendered result
    before_after: tuple[np.ndarray, np.ndarray] | None = None  # for gr.ImageSlider
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    legend: list[list] | None = None
    model3d: Path | None = None
    gallery: list[tuple[np.ndarray, str]] | None = None
    extra: dict = field(default_factory=dict)  # task-specific values a tab shows (e.g. a second 3D view)
    summary: dict = field(default_factory=dict)  # the result in a few numbers (tasks/summary.py), for agents


def compact_maps(result, image_hw: tuple[int, int]):
    """The same result with its float32 per-pixel maps (first two dimensions = the image's) as float16: half the
    bytes across a process boundary (a ZeroGPU call), within ~1e-3 relative. Keypoints, boxes and scalars
    keep full precision (float16 would cost a pixel at x = 1024); coded maps (`CodedMap`, a light answer's) stay
    as they are, already at their files' bits."""
    import dataclasses

    if not dataclasses.is_dataclass(result):
        return result
    stored = {item.name: _stored(result, item.name) for item in dataclasses.fields(result) if item.init}
    changes = {}
    for name, value in stored.items():
        if (isinstance(value, np.ndarray) and value.dtype == np.float32 and value.ndim >= 2
                and value.shape[:2] == tuple(image_hw)):
            changes[name] = value.astype(np.float16)
    return dataclasses.replace(result, **{**stored, **changes}) if changes else result
