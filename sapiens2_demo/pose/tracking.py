"""Person ids across video frames: ultralytics' ByteTrack (or BoT-SORT without ReID) fed with our detections.

One PersonTracker per video, so videos processed side by side never share tracker state. (The detector's
own `YOLO.track(persist=True)` would keep that state on the shared, cached detector model.)
"""

from __future__ import annotations

import numpy as np

TRACK_METHODS = ("bytetrack", "botsort")
REFERENCE_FPS = 30.0  # the frame rate ultralytics' track_buffer (in frames) is written for


class TrackingError(ValueError):
    """Bad tracker settings or detections, said in a plain sentence."""


class PersonTracker:
    """Stable person ids for one video.

    `update(boxes_xyxy, scores, image_hw)` takes one frame's detections (any order) and returns an int64 id
    per box, aligned with the input rows; -1 for a detection the tracker has not confirmed yet (a new
    person is confirmed on their second frame, except on the video's first frame). Keyword `overrides`
    replace entries of ultralytics' `<method>.yaml` (e.g. `match_thresh=0.7`, `track_buffer=60`).
    """

    def __init__(self, frame_rate: float, method: str = "bytetrack", **overrides):
        from ultralytics.trackers.bot_sort import BOTSORT
        from ultralytics.trackers.byte_tracker import BYTETracker  # imports lap (a requirement), never pip
        from ultralytics.utils import YAML, IterableSimpleNamespace
        from ultralytics.utils.checks import check_yaml

        if not (np.isfinite(frame_rate) and frame_rate > 0):
            raise TrackingError(f"Frame rate must be a positive number, got {frame_rate}.")
        if method not in TRACK_METHODS:
            raise TrackingError(f"Unknown tracking method {method!r}; choose one of {', '.join(TRACK_METHODS)}.")
        cfg = YAML.load(check_yaml(f"{method}.yaml"))  # ultralytics' packaged defaults
        unknown = sorted(set(overrides) - set(cfg))
        if unknown:
            raise TrackingError(f"Unknown {method} setting(s) {', '.join(unknown)}; known: {', '.join(cfg)}.")
        # Our detector has already kept only boxes above the user's detection threshold, so every box is a
        # real detection: put them all in ByteTrack's first (high-score) stage and let each start a track.
        cfg["track_high_thresh"] = 0.0
        cfg["new_track_thresh"] = 0.0
        # With every box in the first stage, fusing the score into the cost (1 - IoU * score <= match_thresh)
        # would make a 0.3-score person need IoU >= 0.67 with their track to keep it; plain IoU instead.
        cfg["fuse_score"] = False
        # Keep lost tracks for the same time (~1 s) at any frame rate; the yaml counts frames at 30 fps.
        cfg["track_buffer"] = max(1, round(cfg["track_buffer"] * frame_rate / REFERENCE_FPS))
        if method == "botsort":
            cfg["with_reid"] = False  # no ReID model: nothing to download, nothing to run
            cfg["gmc_method"] = "none"  # camera-motion compensation needs the frame, which we do not pass
        cfg.update(overrides)
        self.frame_rate = float(frame_rate)
        self.method = method
        self.args = IterableSimpleNamespace(**cfg)
        self._tracker = (BYTETracker if method == "bytetrack" else BOTSORT)(args=self.args)

    @property
    def frame_count(self) -> int:
        """Frames seen so far (with or without detections)."""
        return int(self._tracker.frame_id)

    def update(self, boxes_xyxy: np.ndarray, scores: np.ndarray, image_hw: tuple[int, int]) -> np.ndarray:
        from ultralytics.engine.results import Boxes

        boxes = np.asarray(boxes_xyxy, dtype=np.float32)
        scores = np.asarray(scores, dtype=np.float32)
        if boxes.size == 0:
            boxes = boxes.reshape(0, 4)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise TrackingError(f"Boxes must have shape (N, 4) as x1 y1 x2 y2, got {boxes.shape}.")
        if scores.shape != (len(boxes),):
            raise TrackingError(f"Expected {len(boxes)} scores, one per box, got shape {scores.shape}.")
        if len(image_hw) != 2 or min(image_hw) <= 0:
            raise TrackingError(f"Image size must be (height, width) in pixels, got {image_hw}.")

        track_ids = np.full(len(boxes), -1, dtype=np.int64)
        # Feed only boxes the tracker can use, so its detection indices are plain row numbers of what it got.
        usable = (np.isfinite(boxes).all(axis=1) & np.isfinite(scores)
                  & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1]))
        fed = np.flatnonzero(usable)
        detections = np.column_stack([boxes[fed], scores[fed], np.zeros(len(fed), np.float32)])  # class 0
        tracks = self._tracker.update(Boxes(detections, tuple(int(v) for v in image_hw)), None)
        if len(tracks):
            # Rows are [x1, y1, x2, y2, track_id, score, cls, detection index], confirmed tracks only.
            track_ids[fed[tracks[:, -1].astype(np.int64)]] = tracks[:, 4].astype(np.int64)
        return track_ids

    def reset(self) -> None:
        """Forget every track (e.g. at a scene cut); ids start again from 1."""
        self._tracker.reset()


KEEP_S = 2.0  # a person hidden or gone this long keeps their id when they come back
REACH_HEIGHTS_PER_S = 1.5  # how far (in their own box heights per second) a returning person may have moved
MAX_SIZE_RATIO = 1.5  # their box height may have changed by this factor at most
RETURN_REACH_M, RETURN_SPEED_M_S = 0.5, 1.5  # with 3D: how far from where they were heading they may come back
MAX_BONE_CHANGE = 0.2  # their 3D bone lengths (relative, median over the bones) may differ this much at most
MIN_BONES = 5  # bones lifted on both sides for that comparison (part of someone hidden says little)
# this frame's people are re-paired with the ids seen lately when that puts them, together, this much nearer (and
# by at least UNCROSS_MIN_M metres on the ground, or that many box heights without 3D) to where each id was heading
UNCROSS_GAIN = 0.5
UNCROSS_MIN_M = 0.25
MAX_JUMP_M, MAX_SPEED_M_S = 0.3, 3.0  # a person's 3D position moving further is a fault, not the person
VELOCITY_WEIGHT = 0.15  # each frame's share in the velocity (a lifted position is a few cm noisy per frame)
MAX_WALK_M_S = 2.0  # the heading's speed at most
# bones (keypoint name pairs) whose 3D lengths describe a person's build whatever their pose or viewpoint
BUILD = (("left_shoulder", "right_shoulder"), ("left_hip", "right_hip"), ("left_shoulder", "left_elbow"),
         ("right_shoulder", "right_elbow"), ("left_hip", "left_knee"), ("right_hip", "right_knee"),
         ("left_knee", "left_ankle"), ("right_knee", "right_ankle"), ("neck", "left_hip"), ("neck", "right_hip"))


def _at_edge(box, image_hw, margin: float = 2.0) -> bool:
    height, width = image_hw
    return bool(box[0] <= margin or box[1] <= margin or box[2] >= width - margin or box[3] >= height - margin)


def _where(lifted, row: int) -> np.ndarray | None:
    """(3,) the median of one person's lifted keypoints (camera frame), None with fewer than 5 lifted."""
    if lifted is None or row >= lifted.num_people:
        return None
    points = np.asarray(lifted.points[row], np.float64)[np.asarray(lifted.available[row], bool)]
    points = points[np.isfinite(points).all(1)]
    return np.median(points, axis=0) if len(points) >= 5 else None


def _build(points: np.ndarray, available: np.ndarray) -> np.ndarray:
    """(len(BUILD),) bone lengths in metres from one person's lifted keypoints, NaN where not lifted."""
    from .meta import name_index

    index = name_index()
    pairs = np.array([[index[a], index[b]] for a, b in BUILD])
    lengths = np.linalg.norm(points[pairs[:, 0]] - points[pairs[:, 1]], axis=1)
    return np.where(available[pairs].all(1), lengths, np.nan)


class KeypointTracker:
    """PersonTracker's ids, kept through a longer absence by association on geometry and motion (no appearance:
    the Sapiens2 licence excludes re-identification).

    `update(boxes, scores, image_hw, lifted=None, time=None)` returns an id per box like PersonTracker. When the
    tracker starts a new id (or has not confirmed one yet) for someone who may be a person it lost less than
    KEEP_S ago (within reach of where they were heading, on the ground when lifted, else in the image and about
    as tall; with the same 3D bone lengths when lifted), that person's id is given back instead; otherwise the tracker's id stands. When people
    cross and the tracker hands one the other's id (boxes overlap, or one is hidden and the other takes over its
    track; depth tells them apart), the pairing nearest to where each id was heading (its last 3D position, the
    median of the lifted keypoints, and velocity; the box centre without 3D) is restored and kept from then on.
    """

    def __init__(self, frame_rate: float, method: str = "bytetrack", **overrides):
        self.tracker = PersonTracker(frame_rate, method, **overrides)
        self._frame = 0
        self._map: dict[int, int] = {}  # tracker id -> id handed out
        self._people: dict[int, dict] = {}  # id handed out -> last time, centre, height, velocity, build
        self._live: dict[int, int] = {}  # tracker id -> last frame it was seen

    def update(self, boxes_xyxy, scores, image_hw, lifted=None, time: float | None = None) -> np.ndarray:
        raw = self.tracker.update(boxes_xyxy, scores, image_hw)
        now = float(self._frame / self.tracker.frame_rate if time is None else time)
        boxes = np.asarray(boxes_xyxy, np.float64).reshape(-1, 4)
        out = np.full(len(raw), -1, np.int64)
        taken = {self._map[r] for r in raw.tolist() if r in self._map}
        wheres = [_where(lifted, row) for row in range(len(out))]
        for row, raw_id in enumerate(raw.tolist()):
            if raw_id in self._map:
                out[row] = self._map[raw_id]
                continue
            back = self._returning(boxes[row], self._build_of(lifted, row), now, taken, image_hw, wheres[row])
            if back is not None:
                taken.add(back)
                out[row] = back
                if raw_id >= 0:
                    self._map[raw_id] = back
            elif raw_id >= 0:
                out[row] = self._map[raw_id] = raw_id
        self._uncross(out, raw, boxes, wheres, now)
        for row, person_id in enumerate(out.tolist()):
            if person_id >= 0:
                self._remember(person_id, boxes[row], self._build_of(lifted, row), now, _at_edge(boxes[row], image_hw),
                               wheres[row])
        for raw_id in raw.tolist():
            self._live[raw_id] = self._frame
        self._frame += 1
        return out

    @staticmethod
    def _build_of(lifted, row: int):
        if lifted is None or row >= lifted.num_people:
            return None
        return _build(np.asarray(lifted.points[row], np.float64), np.asarray(lifted.available[row], bool))

    def _returning(self, box, build, now: float, taken: set, image_hw, where=None) -> int | None:
        centre, height = (box[:2] + box[2:]) / 2, max(box[3] - box[1], 1.0)
        edge = _at_edge(box, image_hw)
        live_ids = {self._map[r] for r, f in self._live.items() if f >= self._frame - 1 and r in self._map}
        best, best_cost = None, np.inf
        for person_id, last in self._people.items():
            gone = now - last["time"]
            if person_id in taken or person_id in live_ids or not 0 < gone <= KEEP_S:
                continue
            on_ground = where is not None and last["where"] is not None
            if on_ground:  # in 3D: on the ground, whatever hides them
                reach = RETURN_REACH_M + RETURN_SPEED_M_S * gone
                heading = last["where"] + last["velocity"] * min(gone, 1.0)
                distance, size = np.linalg.norm((where - heading)[[0, 2]]), 1.0
            else:
                reach = REACH_HEIGHTS_PER_S * last["height"] * gone + 0.5 * last["height"]
                distance = np.linalg.norm(centre - last["centre"])
                # a box cut by the image's edge says nothing of the person's size
                size = 1.0 if edge or last["edge"] else max(height, last["height"]) / min(height, last["height"])
            change = np.nan
            if build is not None and last["build"] is not None:
                relative = np.abs(build - last["build"]) / last["build"]
                common = np.isfinite(relative)
                change = np.median(relative[common]) if common.sum() >= MIN_BONES else np.nan
            # bone lengths gate only in the image: half hidden, a person's lifted bones are not theirs, while
            # where they stand still is
            if distance > reach or size > MAX_SIZE_RATIO or (not on_ground and change > MAX_BONE_CHANGE):
                continue
            cost = distance / reach + np.log(size) + (0 if np.isnan(change) else min(change / MAX_BONE_CHANGE, 1.0))
            if cost < best_cost:
                best, best_cost = person_id, cost
        return best

    def _heading(self, person_id: int, now: float):
        """Where the id is expected now: (3D position or None, box centre, box height)."""
        last = self._people[person_id]
        gone = now - last["time"]
        where = None if last["where"] is None else last["where"] + last["velocity"] * gone
        return where, last["centre"] + last["velocity_2d"] * gone, last["height"]

    def _cost(self, where, centre, person_id: int, now: float) -> float:
        """How far an observation is from where the id was heading: metres on the ground with 3D on both sides,
        else box centres apart in the id's box heights (about metres for a standing adult)."""
        last = self._people[person_id]
        gone = min(now - last["time"], 1.0)  # a heading is a guess beyond a second
        if where is not None and last["where"] is not None:
            return float(np.linalg.norm((where - last["where"] - last["velocity"] * gone)[[0, 2]]))
        return float(np.linalg.norm(centre - last["centre"] - last["velocity_2d"] * gone) / last["height"])

    def _uncross(self, out: np.ndarray, raw: np.ndarray, boxes: np.ndarray, wheres: list, now: float) -> None:
        """Re-pairs this frame's people with the ids seen lately when the tracker's pairing is much further from
        where those ids were heading (two people crossing, one taking the hidden one's id), or gave one id twice."""
        import lap

        rows = [r for r in range(len(out)) if out[r] in self._people]
        if not rows:
            return
        mine = {int(out[r]) for r in rows}
        lately = [p for p, last in self._people.items() if p not in mine and 0 < now - last["time"] <= KEEP_S]
        ids = sorted(mine) + lately
        cost = np.array([[self._cost(wheres[r], (boxes[r, :2] + boxes[r, 2:]) / 2, p, now) for p in ids]
                         for r in rows])
        _, best, _ = lap.lapjv(cost, extend_cost=True)
        current = sum(cost[i, ids.index(int(out[r]))] for i, r in enumerate(rows))
        optimal = float(cost[np.arange(len(rows)), best].sum())
        twice = len(mine) < len(rows)
        if twice or (optimal < UNCROSS_GAIN * current and current - optimal > UNCROSS_MIN_M):
            for i, r in enumerate(rows):
                out[r] = ids[best[i]]
                if raw[r] >= 0:
                    self._map[int(raw[r])] = int(out[r])

    def _remember(self, person_id: int, box, build, now: float, edge: bool, where=None) -> None:
        last = self._people.get(person_id)
        centre = (box[:2] + box[2:]) / 2
        velocity, velocity_2d = np.zeros(3), np.zeros(2)
        if last is not None and now > last["time"]:  # smoothed over a few frames
            gone = now - last["time"]
            velocity_2d = (1 - VELOCITY_WEIGHT) * last["velocity_2d"] + VELOCITY_WEIGHT * (centre - last["centre"]) / gone
            if where is not None and last["where"] is not None:
                expected = last["where"] + last["velocity"] * gone
                if np.linalg.norm(where - expected) > MAX_JUMP_M + MAX_SPEED_M_S * gone:
                    where = None  # keypoints that landed on someone else: the person is where they were heading
                else:
                    velocity = (1 - VELOCITY_WEIGHT) * last["velocity"] + VELOCITY_WEIGHT * (where - last["where"]) / gone
                    speed = np.linalg.norm(velocity)
                    velocity = velocity * min(1.0, MAX_WALK_M_S / max(speed, 1e-9))
        if where is None and last is not None and last["where"] is not None:
            where = last["where"] + last["velocity"] * (now - last["time"])
            velocity = last["velocity"]
        if build is not None and last is not None and last["build"] is not None:
            with np.errstate(all="ignore"):  # a running median of sorts: the mean of the old and the new
                build = np.where(np.isnan(build), last["build"], np.where(np.isnan(last["build"]), build,
                                                                          0.8 * last["build"] + 0.2 * build))
        elif build is None and last is not None:
            build = last["build"]
        self._people[person_id] = {"time": now, "centre": centre, "height": max(box[3] - box[1], 1.0),
                                   "build": build, "edge": edge, "where": where, "velocity": velocity,
                                   "velocity_2d": velocity_2d}

    def reset(self) -> None:
        self.tracker.reset()
        self._map.clear(), self._people.clear(), self._live.clear()
