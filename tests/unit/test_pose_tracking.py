"""PersonTracker: ultralytics' ByteTrack fed with boxes directly (no detector, no weights)."""

import importlib

import numpy as np
import pytest

from sapiens2_demo.pose.tracking import PersonTracker, TrackingError

SIZE = (480, 640)
STATIC_BOXES = np.array([[10, 10, 60, 110], [200, 10, 250, 110], [400, 50, 450, 150]], np.float32)
STATIC_SCORES = np.array([0.9, 0.5, 0.35], np.float32)


def _static_clip(tracker, frames=20, seed=0):
    """Feeds the same boxes each frame in a shuffled order; returns each box's id per frame, (frames, 3)."""
    rng = np.random.default_rng(seed)
    ids_per_box = []
    for _ in range(frames):
        order = rng.permutation(len(STATIC_BOXES))
        ids = tracker.update(STATIC_BOXES[order], STATIC_SCORES[order], SIZE)
        assert ids.dtype == np.int64 and ids.shape == (len(order),)
        unshuffled = np.empty_like(ids)
        unshuffled[order] = ids
        ids_per_box.append(unshuffled)
    return np.array(ids_per_box)


def test_static_scene_keeps_distinct_ids_aligned_with_shuffled_input():
    ids = _static_clip(PersonTracker(30))
    # The first frame of a video confirms its tracks at once.
    assert (ids >= 0).all()
    assert len(set(ids[0].tolist())) == 3
    assert (ids == ids[0]).all()  # every box keeps its own id whatever row it came in


def test_person_appearing_later_gets_an_id_from_their_second_frame():
    tracker = PersonTracker(30)
    assert tracker.update(np.zeros((0, 4)), np.zeros(0), SIZE).shape == (0,)
    ids = _static_clip(tracker, frames=10)
    assert (ids[0] == -1).all()  # seen once: not confirmed yet
    assert (ids[1:] >= 0).all() and len(set(ids[1].tolist())) == 3
    assert (ids[1:] == ids[1]).all()


def test_two_people_crossing_slowly_keep_their_ids():
    tracker = PersonTracker(30)
    ids = []
    for frame in range(40):
        left, right = 100 + 5 * frame, 300 - 5 * frame  # they pass each other around frame 20
        boxes = np.array([[left, 100, left + 60, 260], [right, 120, right + 60, 280]], np.float32)
        ids.append(tracker.update(boxes, np.array([0.8, 0.7], np.float32), SIZE))
    ids = np.array(ids)
    assert ids[0, 0] != ids[0, 1] and (ids[0] >= 0).all()
    assert (ids == ids[0]).all()


def test_people_moving_apart_keep_their_ids():
    tracker = PersonTracker(25)
    ids = []
    for frame in range(30):
        shift = 4 * frame
        boxes = np.array([[300 - shift, 100, 360 - shift, 260], [330 + shift, 100, 390 + shift, 260]], np.float32)
        ids.append(tracker.update(boxes[::-1], np.array([0.6, 0.9], np.float32), SIZE)[::-1])
    ids = np.array(ids)
    assert ids[0, 0] != ids[0, 1]
    assert (ids == ids[0]).all()


def test_frames_without_detections_advance_the_tracker_and_ids_survive_the_gap():
    tracker = PersonTracker(30)
    before = _static_clip(tracker, frames=5)
    for frame in range(3):
        empty = tracker.update(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), SIZE)
        assert empty.shape == (0,) and empty.dtype == np.int64
    assert tracker.frame_count == 8
    after = _static_clip(tracker, frames=5, seed=1)
    assert (after == before[0]).all()  # lost for 3 frames (< ~1 s buffer), then re-found with the same ids


def test_unusable_boxes_get_minus_one_and_the_rest_are_tracked():
    tracker = PersonTracker(30)
    boxes = np.vstack([STATIC_BOXES, [[5, 5, 5, 50], [np.nan, 0, 10, 10]]]).astype(np.float32)
    scores = np.append(STATIC_SCORES, [0.9, 0.9]).astype(np.float32)
    for _ in range(3):
        ids = tracker.update(boxes, scores, SIZE)
        assert ids[3:].tolist() == [-1, -1]
        assert (ids[:3] >= 0).all() and len(set(ids[:3].tolist())) == 3


def test_low_scoring_detections_still_keep_their_tracks():
    # The detector already thresholded; a 0.3-score person walking must neither start a new id each frame
    # nor be dropped (ultralytics' defaults would leave a 0.2 score out of new tracks entirely).
    tracker = PersonTracker(30)
    ids = [tracker.update(np.array([[100 + 6 * f, 100, 160 + 6 * f, 260]], np.float32),
                          np.array([0.3 if f % 2 else 0.2], np.float32), SIZE)[0] for f in range(20)]
    assert ids == [ids[0]] * 20 and ids[0] >= 0


def test_each_video_has_its_own_tracker_state():
    first, second = PersonTracker(30), PersonTracker(30)
    ids_first = _static_clip(first, frames=3)
    ids_second = _static_clip(second, frames=3)
    assert sorted(ids_first[0].tolist()) == sorted(ids_second[0].tolist()) == [1, 2, 3]  # ids start at 1 per video
    assert first.frame_count == second.frame_count == 3


def test_track_buffer_follows_frame_rate_and_settings_are_from_ultralytics_yaml():
    tracker = PersonTracker(60)
    assert tracker.args.track_buffer == 60  # the yaml's 30 frames at 30 fps = 1 s
    assert tracker.args.match_thresh == 0.8  # untouched default
    assert tracker.args.track_high_thresh == tracker.args.new_track_thresh == 0.0
    assert PersonTracker(30, track_buffer=7, match_thresh=0.6).args.track_buffer == 7


def test_botsort_without_reid_tracks_too():
    tracker = PersonTracker(30, method="botsort")
    assert tracker.args.with_reid is False and tracker._tracker.encoder is None
    ids = _static_clip(tracker, frames=6)
    assert len(set(ids[0].tolist())) == 3 and (ids == ids[0]).all()


@pytest.mark.parametrize("kwargs, message", [
    (dict(frame_rate=0), "Frame rate"),
    (dict(frame_rate=30, method="sort"), "Unknown tracking method"),
    (dict(frame_rate=30, nonsense=1), "Unknown bytetrack setting"),
])
def test_bad_settings_are_refused_in_plain_words(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PersonTracker(**kwargs)


def test_bad_detections_are_refused_in_plain_words():
    tracker = PersonTracker(30)
    with pytest.raises(TrackingError, match="shape"):
        tracker.update(np.zeros((2, 5)), np.zeros(2), SIZE)
    with pytest.raises(TrackingError, match="scores"):
        tracker.update(STATIC_BOXES, np.zeros(2), SIZE)
    with pytest.raises(TrackingError, match="Image size"):
        tracker.update(STATIC_BOXES, STATIC_SCORES, (0, 640))


def test_ultralytics_matching_uses_installed_lap_and_never_pip(monkeypatch):
    import ultralytics.utils.checks as checks
    from ultralytics.trackers.utils import matching

    def no_pip(*args, **kwargs):
        raise AssertionError(f"ultralytics tried to install {args}")

    monkeypatch.setattr(checks, "check_requirements", no_pip)
    importlib.reload(matching)  # re-runs its `import lap`, which falls back to check_requirements if missing
    assert matching.lap.__name__ == "lap" and hasattr(matching.lap, "lapjv")


def test_keypoint_tracker_gives_a_returning_person_their_id_back():
    """A person walks right, is gone for 1.5 s (36 frames at 24 fps) and comes back a little further on: ByteTrack
    alone starts a new id (its buffer is ~1 s); KeypointTracker hands the old one back (within reach, as tall)."""
    from sapiens2_demo.pose.tracking import KeypointTracker

    def clip(tracker):
        ids = []
        for frame in range(80):
            if 20 <= frame < 56:
                tracker.update(np.zeros((0, 4)), np.zeros(0), SIZE)
                continue
            x = 100 + 3 * frame
            ids.append(int(tracker.update(np.array([[x, 100, x + 60, 260]], np.float32), np.array([0.9], np.float32),
                                          SIZE)[0]))
        return ids

    plain, kept = clip(PersonTracker(24)), clip(KeypointTracker(24))
    assert len({i for i in plain if i >= 0}) == 2  # the tracker alone: a second id after the gap
    assert {i for i in kept if i >= 0} == {kept[0]} and kept.count(-1) == 0
