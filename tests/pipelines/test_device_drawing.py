"""Drawing on the model's device (tasks/drawn.py, render/on_device.py), run here on the CPU by switching on
the device path that CUDA takes (`device_post.use_device_post`): the pictures equal the host renderers'
within one grey level, except where the torch and numpy label upsampling disagree (<= 0.1 % of pixels, as
tests/pipelines/test_device_post.py allows), and a video that wants only pictures never draws on the host."""

import numpy as np
import pytest

from sapiens2_demo import gpu, tasks
from sapiens2_demo.jobs.video import process_video
from sapiens2_demo.pipelines import device_post
from sapiens2_demo.results import DrawnFrame, Job
from tests.videos import count_frames, make_video


@pytest.fixture()
def on_device(monkeypatch):
    monkeypatch.setattr(device_post, "use_device_post", lambda device: True)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("clip") / "clip.mp4", frames=6, size=(160, 120), fps=6)


def _frames(person_image):
    """A landscape crop and a portrait crop: the padding and the stretch both differ."""
    return [np.ascontiguousarray(person_image[:96, :160]), np.ascontiguousarray(person_image[:150, :90])]


def _assert_close(drawn, host, name, flips: float = 0.0):
    """Within one grey level on all but 0.1 % of pixels. Depth: on all but 1 %, and within one step of the colour map
    (its index is rounded from maps that torch's and cv2's resizes give within ~1e-5) on all but a `flips` share:
    pixels whose depth is so near 0 m that the two roads' maps put it on either side (valid or background)."""
    assert drawn.shape == host.shape and drawn.dtype == np.uint8, name
    difference = np.abs(drawn.astype(int) - host.astype(int)).max(axis=2)
    off = (difference > 1).mean()
    if "depth" in name or "pointmap" in name:
        from sapiens2_demo.render.depth import colormap_lut

        step = int(np.abs(np.diff(colormap_lut("turbo").astype(int), axis=0)).max())
        assert off <= 1e-2 and (difference > step).mean() <= flips, \
            f"{name}: {off:.4%} off, {(difference > step).mean():.4%} by more than a step, the most by {difference.max()}"
    else:
        assert off <= 1e-3, f"{name}: {off:.4%} of pixels differ by more than one level"


@pytest.mark.parametrize("task, options", [
    ("segment", {"opacity": 0.5}),
    ("segment", {"opacity": 0.8}),
    ("normals", {"remove_background": True, "background": "black"}),
    ("normals", {"remove_background": True, "background": "image"}),
    ("normals", {"remove_background": False}),
    ("matting", {"background": "colour", "colour": "#3366cc"}),
    ("matting", {"background": "image", "background_image": np.full((40, 30, 3), (10, 200, 90), np.uint8)}),
    ("matting", {"background": "transparent", "opaque": True}),  # a video shows it over grey
    ("pointmap", {"remove_background": True}),
    ("pointmap", {"remove_background": False}),
])
def test_pictures_drawn_on_the_device_equal_the_host_renderers(task, options, person_image, manager, key,
                                                                 monkeypatch):
    spec = tasks.get(task)
    frames = _frames(person_image)
    job = spec.job(None, options)
    [results] = gpu.answers(key, frames, [job], batch_size=2)
    renderer = spec.renderer(**options)
    host = [renderer.annotate(frame, result) for frame, result in zip(frames, results)]

    monkeypatch.setattr(device_post, "use_device_post", lambda device: True)
    drawn_job = Job(job.task, job.size, {**job.options, "draw": options})
    [drawn] = gpu.answers(key, frames, [drawn_job], batch_size=2)
    assert all(isinstance(d, DrawnFrame) for d in drawn) and len(drawn) == 2
    for d, h in zip(drawn, host):
        _assert_close(d.image, h, f"{task} {options}")


def test_without_a_device_path_the_draw_request_is_ignored(person_image, key):
    """On the CPU (no device post-processing) a job asking for pictures gets the usual results."""
    job = tasks.get("segment").job(None, {})
    [results] = gpu.answers(key, _frames(person_image), [Job(job.task, job.size, {**job.options, "draw": {}})])
    assert not any(isinstance(r, DrawnFrame) for r in results) and results[0].labels.ndim == 2


def _host_drawing_counted(monkeypatch, task="segment"):
    from sapiens2_demo.render import frames, normals, parts

    annotator = {"segment": parts.PartsAnnotator, "pointmap": frames.SteadyDepthAnnotator,
                 "normals": normals.NormalsAnnotator}[task]
    calls = []
    real = annotator.annotate

    def counting(self, image, result):
        calls.append(1)
        return real(self, image, result)

    monkeypatch.setattr(annotator, "annotate", counting)
    return calls


@pytest.mark.parametrize("task,options", [("segment", {}), ("pointmap", {}), ("normals", {"temporal_smoothing": True}),
                                          ("pointmap", {"temporal_smoothing": True})])
def test_a_video_wanting_only_pictures_draws_them_on_the_device(task, options, clip, key, tmp_path, monkeypatch):
    """GPU calls of 2 frames: the depth colour scale goes on from call to call as it does on the host, and so does the
    steady filter (temporal_smoothing: filtered and drawn on the device, against the host road's filter and drawing)."""
    from sapiens2_demo.media.video import VideoSink

    written = []
    real_write = VideoSink.write
    monkeypatch.setattr(VideoSink, "write", lambda self, picture, *a: written.append(picture.copy())
                        or real_write(self, picture, *a))
    calls = _host_drawing_counted(monkeypatch, task)
    process_video(clip, task, key, tmp_path / "host", batch_size=1, chunk_size=2, **options)
    assert len(calls) == 6
    calls.clear()
    host, written[:] = list(written), []

    monkeypatch.setattr(device_post, "use_device_post", lambda device: True)
    out = process_video(clip, task, key, tmp_path / "device", batch_size=1, chunk_size=2, **options)
    assert calls == [] and out.frames == 6 and count_frames(out.video) == 6
    assert len(written) == len(host) == 6
    # steady depth: the random weights put a pixel or two a frame near 0 m, and the filter's float16 state (a step of
    # up to 0.0125 m at these depths) moves one across it on one road and not the other
    flips = 1e-3 if options.get("temporal_smoothing") else 0.0
    for i, (drawn, expected) in enumerate(zip(written, host)):
        _assert_close(drawn, expected, f"{task} video frame {i}", flips)


def test_a_video_writing_per_frame_data_keeps_the_results(clip, key, tmp_path, on_device, monkeypatch):
    """frame_exports: the label PNGs need the labels, so the frames come back as results and are drawn here."""
    calls = _host_drawing_counted(monkeypatch)
    out = process_video(clip, "segment", key, tmp_path, batch_size=2, frame_exports=True)
    assert len(calls) == 6 and len(out.files) > 1


def test_the_all_tasks_grid_mixes_device_pictures_and_host_drawing(clip, key, tmp_path, on_device):
    """Pose and depth are drawn on the host; body parts, normals and matting come back drawn."""
    out = process_video(clip, "all", key, tmp_path, batch_size=2, flip_test=False)
    assert out.frames == 6 and count_frames(out.video) == 6


def test_a_live_frame_is_drawn_on_the_device(person_image, manager, on_device, monkeypatch):
    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.ui import live_tab

    calls = _host_drawing_counted(monkeypatch)
    ctx = AppContext(manager=manager)
    shown, stats = live_tab.live_frame(ctx, person_image, "segment", "0.4b")
    live_tab.forget_sessions(ctx)
    assert calls == [] and isinstance(shown, np.ndarray) and shown.dtype == np.uint8
    assert shown.shape[:2] == live_tab.downscale(person_image).shape[:2] and "Cannot run" not in stats


def test_matting_video_is_drawn_with_torch_on_a_cpu_too(clip, key, tmp_path, monkeypatch):
    """TaskSpec.draw_on_cpu: matting's drawing path measured faster on a CPU (docs/decisions.md, the GPU road)."""
    from sapiens2_demo.render import matting

    calls = []
    monkeypatch.setattr(matting.MattingAnnotator, "annotate", lambda self, image, result: calls.append(1))
    out = process_video(clip, "matting", key, tmp_path, batch_size=2)
    assert calls == [] and count_frames(out.video) == 6


@pytest.mark.parametrize("colour_bar", [False, True])
def test_the_depth_colour_scale_carries_over_gpu_calls(person_image, key, on_device, colour_bar):
    """Four frames in two calls, the second starting from the first's scale (`draw_state`), draw what one host
    renderer draws over the four (with each frame's colour bar, when asked); starting afresh instead changes the
    third picture."""
    spec = tasks.get("pointmap")
    frames = [np.ascontiguousarray(person_image[i * 20:i * 20 + 120, i * 30:i * 30 + 160]) for i in range(4)]
    job = spec.job(None, {"remove_background": False})
    [results] = gpu.answers(key, frames, [job], batch_size=2)
    renderer = spec.renderer(colour_bar=colour_bar)
    host = [renderer.annotate(frame, result) for frame, result in zip(frames, results)]
    assert (host[0].shape[1] > 160) == colour_bar and host[0].shape[0] == 120

    def drawn(part, state):
        options = {**job.options, "draw": {"colour_bar": colour_bar}, "draw_state": state}
        return gpu.answers(key, part, [Job(job.task, job.size, options)], batch_size=2)[0]

    first = drawn(frames[:2], None)
    assert first[-1].state is not None
    second = drawn(frames[2:], first[-1].state)
    for i, (d, h) in enumerate(zip(first + second, host)):
        _assert_close(d.image, h, f"depth frame {i}")
    afresh = drawn(frames[2:], None)
    assert (np.abs(afresh[0].image.astype(int) - host[2].astype(int)).max(axis=2) > 1).mean() > 0.05


@pytest.mark.parametrize("task,field", [("normals", "normals"), ("pointmap", "points")])
def test_steady_maps_drawn_on_the_device_go_on_across_gpu_calls(task, field, person_image, manager, key, on_device):
    """temporal_smoothing drawn on the device (the filter riding on the renderer, tasks/drawn.py): two calls of two
    batches draw what the steady results of the device road (`steady_on_device`, batch by batch) give to the host
    renderer; the state pickled (as it crosses from a ZeroGPU worker: numpy) goes on alike; starting afresh does
    not. Normals equal to the bit (the twin repeats the host's arithmetic), depth as `_assert_close` allows."""
    import pickle

    from sapiens2_demo.pipelines import steady

    rng = np.random.default_rng(0)
    still = [np.ascontiguousarray(person_image[:96, :128]), np.ascontiguousarray(person_image[40:136, 60:188])]
    frames = [np.clip(still[i // 4].astype(np.int16) + rng.integers(-2, 3, still[0].shape), 0, 255).astype(np.uint8)
              for i in range(8)]  # four still frames with sensor noise, a cut, four more
    spec = tasks.get(task)
    results, previous = [], None
    for start in range(0, 8, 2):
        done = steady.steady_on_device(manager, "0.4b", frames[start:start + 2], field, True, previous)
        results, previous = results + done, done[-1]
    renderer = spec.renderer()
    host = [renderer.annotate(frame, result) for frame, result in zip(frames, results)]

    def drawn(part, state):
        options = {**spec.job(None, {}).options, "temporal_smoothing": True, "draw": {"steady": True},
                   "draw_state": state}
        return gpu.answers(key, part, [Job(task, "0.4b", options)], batch_size=2)[0]

    first = drawn(frames[:4], None)
    state = first[-1].state
    crossed = pickle.loads(pickle.dumps(state))
    assert isinstance(crossed.steady.value, np.ndarray) and crossed.steady.value.dtype == np.float16
    for second in (drawn(frames[4:], state), drawn(frames[4:], crossed)):
        for i, (d, h) in enumerate(zip(first + second, host)):
            if task == "normals":
                np.testing.assert_array_equal(d.image, h, err_msg=f"frame {i}")
            else:
                _assert_close(d.image, h, f"steady depth frame {i}")
    afresh = drawn(frames[5:7], None)  # still frames: afresh, the first is its own map, not the smoothed one
    assert (np.abs(afresh[0].image.astype(int) - host[5].astype(int)).max(axis=2) > 1).mean() > 0.05


def test_the_torch_twins_draw_what_the_annotators_draw_on_synthetic_maps():
    """Every option of the four annotators on random maps (no model): equal up to one grey level where cv2 and torch
    round a half differently; depth equal (same float32 steps) but for pixels whose colour index sits on a rounding
    edge."""
    import torch

    from sapiens2_demo.models.inference import upload
    from sapiens2_demo.render import on_device
    from sapiens2_demo.render.frames import SteadyDepthAnnotator
    from sapiens2_demo.render.matting import MattingAnnotator
    from sapiens2_demo.render.normals import NormalsAnnotator
    from sapiens2_demo.render.parts import PartsAnnotator
    from sapiens2_demo.results import MattingResult, NormalsResult, PointmapResult

    rng = np.random.default_rng(0)
    h, w = 48, 64
    image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    [device_image] = upload([image], "cpu")
    labels = rng.integers(0, 29, (h, w), dtype=np.uint8)
    mask = labels > 0
    for opacity in (0.5, 0.3, 1.0):
        for skip in (False, True):
            annotator = PartsAnnotator(opacity=opacity, skip_background=skip)
            drawn = on_device.parts(annotator, device_image, torch.from_numpy(labels)).numpy()
            _assert_close(drawn, annotator.annotate(image, labels), f"parts {opacity} {skip}")

    normals = rng.normal(size=(h, w, 3)).astype(np.float32)
    normals /= np.linalg.norm(normals, axis=2, keepdims=True)
    for background in ("black", "image"):
        annotator = NormalsAnnotator(background)
        drawn = on_device.normals(annotator, device_image, torch.from_numpy(normals), torch.from_numpy(mask)).numpy()
        np.testing.assert_array_equal(drawn, annotator.annotate(image, NormalsResult(normals=normals, mask=mask)))

    alpha = rng.random((h, w), dtype=np.float32)
    foreground = (rng.random((h, w, 3), dtype=np.float32) * alpha[..., None]).astype(np.float32)
    for annotator in (MattingAnnotator("colour", "#3366cc"), MattingAnnotator(image=image[::-1])):
        drawn = on_device.matting(annotator, torch.from_numpy(alpha), torch.from_numpy(foreground)).numpy()
        np.testing.assert_array_equal(drawn, annotator.annotate(image, MattingResult(alpha=alpha, foreground=foreground)))

    points = rng.normal(size=(h, w, 3)).astype(np.float32)
    points[..., 2] = rng.uniform(0.5, 8.0, (h, w))
    points[0, :5, 2] = [np.nan, np.inf, -1.0, 0.0, 300.0]  # invalid, behind, at the camera, beyond the far limit
    host, device = SteadyDepthAnnotator(), SteadyDepthAnnotator()
    for shift in (0.0, 0.7):  # two frames: the running scale moves
        points[..., 2] += shift
        expected = host.annotate(image, PointmapResult(points=points, scale=1.0, focal_length=1.0, mask=mask))
        drawn = on_device.depth(device, torch.from_numpy(points), torch.from_numpy(mask)).numpy()
        kept = on_device.read_depth_bounds(on_device.depth_bounds_bytes(device).numpy())  # the scale on the device
        assert (kept.near, kept.far) == pytest.approx((host.state.near, host.state.far), rel=1e-6)
        _assert_close(drawn, expected, f"depth {shift}")


def test_the_depth_scale_found_on_the_device_equals_the_one_read_back():
    """The first frame's bounds computed where the map is (the invalid pixels marked NaN, not selected: no count read
    back; percentiles, clamp and widening in float64) equal the old road's exactly: the valid depth selected,
    torch.quantile read back, depth.clamped_bounds on the host. Mixed, none valid, one depth (widened), beyond the
    limits."""
    import torch

    from sapiens2_demo.render import on_device
    from sapiens2_demo.render.depth import FAR_LIMIT_M, NEAR_LIMIT_M, PERCENTILES, DepthBounds, clamped_bounds
    from sapiens2_demo.render.frames import SteadyDepthAnnotator

    rng = np.random.default_rng(3)
    z = rng.uniform(0.3, 9.0, (40, 50)).astype(np.float32)
    z[:3] = np.nan
    z[3, :7] = -2.0
    mask = rng.random((40, 50)) > 0.3
    cases = {"mixed": (z, mask), "none valid": (z, np.zeros_like(mask)), "one depth": (np.full_like(z, 2.5), None),
             "beyond the limits": (np.where(mask, 400.0, 0.01).astype(np.float32), None)}
    for name, (depth, where) in cases.items():
        points = np.stack([np.zeros_like(depth), np.zeros_like(depth), depth], axis=-1)
        annotator = SteadyDepthAnnotator()
        on_device.depth(annotator, torch.from_numpy(points), None if where is None else torch.from_numpy(where))
        kept = on_device.read_depth_bounds(on_device.depth_bounds_bytes(annotator).numpy())
        valid = torch.from_numpy(np.isfinite(depth) & (depth > 0) & (True if where is None else where))
        values = torch.from_numpy(depth)[valid].double()
        if values.numel():
            low, high = torch.quantile(values, torch.tensor(PERCENTILES, dtype=torch.float64) / 100).tolist()
            old = clamped_bounds(low, high)
        else:
            old = DepthBounds(NEAR_LIMIT_M, FAR_LIMIT_M)
        assert kept == old, name
