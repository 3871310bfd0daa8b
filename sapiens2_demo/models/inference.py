"""The model step shared by every task: processor pre-processing and a no-grad forward.

Pre-processing is transformers' `Sapiens2ImageProcessor` itself, with the per-task resize rule of the
reference (stretch for seg/matting, keep-aspect centre pad for normal/pointmap, box crops for pose).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time

import numpy as np

from .. import ledger
from .compile import one_road
from .loading import ModelBroken, check_road
from .manager import LoadedModel

PADDED_TASKS = ("normal", "pointmap")  # keep aspect, centre zero-pad (processor do_pad=True)


def input_size(processor) -> tuple[int, int]:
    """Model input (height, width) from the checkpoint's processor config (1024x768 for released ones)."""
    return int(processor.size["height"]), int(processor.size["width"])


def preprocess(loaded: LoadedModel, images: np.ndarray | list[np.ndarray], task: str, boxes_xywh=None):
    """RGB uint8 (H, W, 3) image, or a list of them (or of `upload`'s (3, H, W) tensors) -> pixel_values
    (B, 3, h, w) on the model's device and dtype (on CUDA the processor itself works there).

    Pose: `boxes_xywh` holds the person boxes, (N, 4) for one image or a list of (N_i, 4) for a list of images;
    the crops of every image come out in order, image by image.
    """
    batch = images if isinstance(images, (list, tuple)) else [images]
    ahead = _LOOKAHEAD.get(None)
    if ahead is not None and boxes_xywh is None:  # a Lookahead's unit: this call is learnt, and maybe done already
        lookahead, key, asked = ahead
        asked.append((loaded, task))
        done = lookahead.take(key, loaded, batch, task)
        if done is not None:
            return done
    kwargs = {"do_pad": task in PADDED_TASKS}
    if boxes_xywh is not None:
        per_image = boxes_xywh if isinstance(images, (list, tuple)) else [boxes_xywh]
        kwargs["boxes"] = [np.asarray(boxes, dtype=np.float32).reshape(-1, 4).tolist() for boxes in per_image]
    if on_cuda(loaded.device):  # the uint8 frames cross once and are resized and normalised on the GPU
        kwargs["device"] = loaded.device
    book = ledger.active()
    if boxes_xywh is None and book is None and not on_cuda(loaded.device):
        pixel_values = processed_channels_last(loaded.processor, batch, kwargs["do_pad"])
        if pixel_values is not None:
            return pixel_values.to(dtype=loaded.dtype)
    if book is not None:  # numpy frames cross as uint8, pageable; the processor is not looked into
        for image in batch:
            if isinstance(image, np.ndarray):
                ledger.record("h2d", "preprocess", image.shape, str(image.dtype), image.itemsize,
                              source=ledger.address(image))
        batch = ledger.off_device(list(batch))
    inputs = loaded.processor(images=list(batch), return_tensors="pt", **kwargs)
    return ledger.on_device(inputs["pixel_values"].to(device=loaded.device, dtype=loaded.dtype), ledger.batch_mark())


_LOOKAHEAD: contextvars.ContextVar = contextvars.ContextVar("lookahead")


class Lookahead:
    """A CPU call's (or video's) next batch pre-processed in a thread of its own while this batch's forwards run:
    on a CPU the resize and normalisation of a batch's frames held the forwards' thread between two forwards
    (a 720p normals video: 4.5-5.5 ms a frame for its two models). Which pre-processing a job's batch asks for
    (which models, which resize rule) is learnt from its last batch, not declared; a call takes a result only
    for the very same frames, so a miss costs nothing but the thread's work. Used as a context manager."""

    def __init__(self):
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sapiens2-pre")
        self._asked: dict = {}  # a job's key -> its last batch's [(loaded, task)]
        self._queued: dict = {}  # (job key, id(loaded), task, the frames' keys) -> (the frames, future values)

    def during(self, key, start, upcoming: list | None):
        """`start()` (a unit's pre-processing and forwards, in this thread), with `upcoming` (the job's next batch's
        frames, or None) queued first for what this job's last start pre-processed."""
        frames = list(upcoming or ())
        ahead = {(key, id(loaded), task, frame_keys(frames)):
                 (frames, self._pool.submit(preprocess, loaded, frames, task))
                 for loaded, task in (self._asked.get(key, ()) if frames else ())}
        self._queued.update(ahead)
        asked: list = []
        token = _LOOKAHEAD.set((self, key, asked))
        try:
            return start()
        finally:
            _LOOKAHEAD.reset(token)
            self._asked[key] = asked
            for stale in [k for k in self._queued if k[0] == key and k not in ahead]:
                self._queued.pop(stale)[1].cancel()  # queued for this job and not taken: its batch went otherwise

    def take(self, key, loaded, frames: list, task: str):
        """The pixel values queued for this job of exactly these frames (`frame_keys`: the queued frames are held,
        so their memory is no other frame's) for this model and rule, or None (each job its own: two jobs of one
        call may pre-process the same frames for one model, the body-part masks)."""
        _, future = self._queued.pop((key, id(loaded), task, frame_keys(frames)), (None, None))
        return None if future is None else future.result()

    def __enter__(self) -> Lookahead:
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._queued.clear()


def _address(image) -> int:
    """Where a frame's pixels are: a numpy frame, or a tensor (`upload`'s CPU tensor views the frame's memory)."""
    return image.data_ptr() if hasattr(image, "data_ptr") else image.__array_interface__["data"][0]


def frame_key(image) -> tuple:
    """Where a frame's pixels are and how they lie, in (H, W, C) order: a uint8 frame and `upload`'s (3, H, W) CPU
    view of it give one key (a tensor's strides count elements, a numpy array's bytes: the same for uint8). While
    the frame is held, no other frame has its key."""
    if hasattr(image, "data_ptr"):  # a tensor; `upload`'s are (3, H, W) views of (H, W, 3) frames
        view = image.permute(1, 2, 0) if image.ndim == 3 else image
        return (str(image.device), image.data_ptr(), tuple(view.shape), tuple(view.stride()),
                str(image.dtype).removeprefix("torch."))
    return ("cpu", _address(image), tuple(image.shape), tuple(image.strides), str(image.dtype))


def frame_keys(frames) -> tuple:
    """`frame_key` of each frame: two lists of the same frames, or of views of them, give the same key."""
    return tuple(map(frame_key, frames))


def processed_channels_last(processor, images: list, pad: bool):
    """The processor's own steps (resize, centre pad, rescale and normalise) on CPU frames laid out channels last,
    or None where its config asks for more than those. torch's antialiased uint8 resize has a vectorised kernel
    for that layout only, and the processor first makes each image channels-first: at 720p this is 3x faster on
    the stand-ins' 256x192 input and 1.2-2x on the released 1024x768, and the same bytes (tests/unit/test_preprocess.py)."""
    import torch
    from transformers.image_utils import SizeDict

    if not processor.do_resize or processor.do_center_crop or not processor.do_normalize:
        return None
    arrays = [image.permute(1, 2, 0) if torch.is_tensor(image) else torch.from_numpy(np.asarray(image))
              for image in images]  # (H, W, 3) each: `upload`'s tensors are (3, H, W) views of such
    if any(a.dtype != torch.uint8 or a.ndim != 3 or a.shape[-1] != 3 for a in arrays):
        return None
    size, out, shapes = processor.size, [None] * len(arrays), {tuple(a.shape) for a in arrays}
    for shape in shapes:  # one resize a frame size
        where = [i for i, a in enumerate(arrays) if tuple(a.shape) == shape]
        x = torch.stack([arrays[i] for i in where]).permute(0, 3, 1, 2)  # (B, 3, H, W), channels last in memory
        if pad:  # keep the aspect, then zero-pad about the centre: the processor's own do_pad
            x = processor.resize(x, SizeDict(max_height=size.height, max_width=size.width), processor.resample)
            x = processor.center_crop(x, size)
        else:
            x = processor.resize(x, size, processor.resample)
        x = processor.rescale_and_normalize(x.contiguous(), processor.do_rescale, processor.rescale_factor,
                                            True, processor.image_mean, processor.image_std)
        if len(shapes) == 1:
            return x
        for i, row in zip(where, x):
            out[i] = row
    return torch.stack(out)


def on_cuda(device) -> bool:
    return str(device).split(":")[0] == "cuda"


_SHARED: contextvars.ContextVar = contextvars.ContextVar("shared")


@contextlib.contextmanager
def sharing():
    """Within it, `shared` work is done once: the jobs of one call (All tasks) start a batch one after the other,
    and the same frames' upload and body-part forward (segmentation's, and normals' and depth's masks) are the same."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def shared(key: tuple, make):
    """`make()`, or within `sharing` what it gave for the same key there (keys name the frames by `frame_keys`)."""
    memo = _SHARED.get(None)
    if memo is None:
        return make()
    if key not in memo:
        memo[key] = make()
    return memo[key]


def once(finish):
    """A stage's finish that runs once however often it is called (two jobs sharing a start both finish it)."""
    lock, done = threading.Lock(), []

    def finished():
        with lock:
            if not done:
                done.append(finish())
        return done[0]

    return finished


def upload(frames: list[np.ndarray], device) -> list:
    """`upload_now`, once for the same frames within `sharing`."""
    return list(shared(("upload", str(device), *frame_keys(frames)), lambda: upload_now(frames, device)))


def upload_now(frames: list[np.ndarray], device) -> list:
    """RGB uint8 (H, W, 3) frames -> (3, H, W) uint8 tensors on `device`, one copy each (what `preprocess`
    and the device-side drawing both read). On CUDA through pinned memory without blocking (a copy from pageable
    memory would wait for everything queued on the device, the last batch's forward, first): the frames are copied
    into a pinned buffer kept for their size (`STAGING`) and cross in one copy."""
    import torch

    arrays = [np.ascontiguousarray(frame[..., :3]) for frame in frames]
    cuda = on_cuda(device)
    if cuda and len({a.shape for a in arrays}) == 1:  # a batch of one size: staged, one copy
        host = STAGING.take((len(arrays), *arrays[0].shape))
        view = host.numpy()
        for i, a in enumerate(arrays):
            np.copyto(view[i], a)
        _ledger_copies(list(host), frames)
        up = host.to(device, non_blocking=True)
        STAGING.give(host)
        return ledger.on_device(list(up.permute(0, 3, 1, 2)), ledger.batch_mark())
    tensors = [torch.from_numpy(a) for a in arrays]
    if cuda:  # frames of several sizes: each pinned on its own
        tensors = [t.pin_memory() for t in tensors]
    _ledger_copies(tensors, frames)
    return ledger.on_device([t.to(device, non_blocking=cuda).permute(2, 0, 1) for t in tensors], ledger.batch_mark())


def _ledger_copies(tensors, frames) -> None:
    """A recording ledger's uploads, one a frame."""
    book = ledger.active()
    if book is not None:
        for t, frame in zip(tensors, frames):
            book.copy_in(t, "upload", blocking=False, source=ledger.address(frame))  # pinned on CUDA


class Staging:
    """Pinned host buffers that carry frames up to the GPU, kept per batch shape and reused once their copy is done.
    Pinning every frame anew (`pin_memory()`) took a third of the main thread's time in a body-part video on an H200
    (py-spy, docs/host.md). `pinned=False` (the CPU's tests) keeps plain buffers, and each is free at once."""

    KEEP = 3     # buffers a shape: the batch crossing, the one queued behind the forward, the one being filled
    SHAPES = 3   # shapes kept: a video's batch and its last, short one, an image request's; the oldest let go

    def __init__(self, pinned: bool = True):
        import threading
        from collections import OrderedDict

        self.pinned = pinned
        self._lock = threading.Lock()
        self._pools: OrderedDict = OrderedDict()  # shape -> [(buffer, its copy's event or None)]

    def take(self, shape: tuple):
        """A (B, H, W, C) uint8 host buffer nobody else uses; waits only when KEEP of them are all still crossing."""
        import torch

        shape, wait = tuple(shape), None
        with self._lock:
            pool = self._pools.setdefault(shape, [])
            self._pools.move_to_end(shape)
            while len(self._pools) > self.SHAPES:
                self._pools.popitem(last=False)
            ready = next((i for i, (_, done) in enumerate(pool) if done is None or done.query()), None)
            if ready is not None:
                return pool.pop(ready)[0]
            if len(pool) >= self.KEEP:
                buffer, wait = pool.pop(0)
        if wait is not None:
            wait.synchronize()
            return buffer
        return torch.empty(shape, dtype=torch.uint8, pin_memory=self.pinned)

    def give(self, buffer) -> None:
        """`buffer` back, after the copies from it were queued on this thread's current stream."""
        done = self._copies_queued()
        with self._lock:
            pool = self._pools.get(tuple(buffer.shape))
            if pool is not None and len(pool) < self.KEEP:
                pool.append((buffer, done))

    def _copies_queued(self):
        """An event after the copies queued so far on this thread's stream (None: nothing to wait for)."""
        if not self.pinned:
            return None
        import torch

        done = torch.cuda.Event()
        done.record()
        return done


STAGING = Staging()


def image_size(image) -> tuple[int, int]:
    """(H, W) of an RGB (H, W, 3) array or of `upload`'s (3, H, W) tensor."""
    return tuple(image.shape[:2]) if isinstance(image, np.ndarray) else tuple(image.shape[-2:])


def copy_back(tensor):
    """`tensor` on the host, waiting for it alone: on CUDA an asynchronous copy into pinned memory and a wait on an
    event after it (a copy into pageable memory crawls: 16.9 ms for a batch of eight drawn 720p frames on an H200
    machine, against ~1 ms pinned); elsewhere `.cpu()` (which the ledger counts as the same one copy and one wait)."""
    import torch

    if not tensor.is_cuda:
        return tensor.cpu()
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)  # torch's pinned-block cache reuses it
    host.copy_(tensor, non_blocking=True)
    done = torch.cuda.Event()
    done.record()  # on this thread's current stream, after the copy
    done.synchronize()
    return host


def forward(loaded: LoadedModel, pixel_values, *, on_device: bool = False, **kwargs):
    """Run the model without gradients; every floating output comes back as float32 on the CPU, or left
    where it is with `on_device` (device-side post-processing on CUDA copies only final-size results)."""
    import torch

    book = ledger.active()
    if book is not None:  # the model is one queued unit: its inputs go in as plain tensors
        for value in [pixel_values, *kwargs.values()]:
            if torch.is_tensor(value) and not isinstance(value, ledger.DEVICE_TENSOR()):
                book.copy_in_once(value, "forward")  # a host tensor handed to the model crosses first
        pixel_values, kwargs = ledger.off_device(pixel_values), ledger.off_device(kwargs)
    state = loaded.compiled
    try:
        with torch.inference_mode(), one_road(state) as compiled:
            started = time.perf_counter()
            outputs = loaded.model(pixel_values=pixel_values, **kwargs)
    except RuntimeError as error:  # a dtype or device mismatch inside: is the model itself off its road?
        try:
            check_road(loaded.model, loaded.device, loaded.dtype, str(loaded.source).rstrip("/").split("/")[-1])
        except ModelBroken as broken:
            loaded.broken = True  # the manager drops it at the next get and loads it again
            raise broken from error
        raise
    if state is not None:
        if book is None and loaded.device == "cpu":  # a CPU forward is over when it returns
            state.observe(compiled, (time.perf_counter() - started) / max(1, len(pixel_values)))
        state.forward_done()
    if book is not None:  # the flip test's mirrored forward is part of its batch
        outputs = ledger.forward(type(loaded.model).__name__, dict(outputs.items()), batch="flip_pairs" not in kwargs)
    if on_device:
        return dict(outputs.items())
    return {
        name: value.float().cpu() if torch.is_tensor(value) and value.is_floating_point() else value
        for name, value in outputs.items()
    }
