"""The person detector on the device road without a wait of its own: ultralytics' letterbox on the host, the small
letterboxed frames up from pinned memory (no wait), the detector's torch module on the device, and the best
`CANDIDATES` boxes per frame picked there in a fixed shape, so their copy back can ride with the next copy back
(`device_post.Rider`: the next chunk's boxes cross with this batch's keypoints). Non-max suppression then runs on
the host, with ultralytics' own `non_max_suppression` and `scale_boxes`: the boxes are `YOLO.predict`'s.
"""

from __future__ import annotations

import numpy as np

from .. import ledger
from ..models.manager import CheckpointUnavailable
from ..pose.detector import PERSON_CLASSES, _kept, _nobody, _unavailable
from .riders import Rider

CANDIDATES = 300  # boxes a frame that cross before NMS (7.2 KB, an end-to-end model's 300 rows); more above the
# threshold (a crowd): every anchor crosses, in a second copy
MAX_DET = 300  # what detect_people_batch asks predict for
NO_TIME_LIMIT = 1e6  # seconds a frame for ultralytics' NMS


def find_people_queued(images: list[np.ndarray], manager, score_threshold: float = 0.3, nms_iou: float = 0.3,
                       max_people: int = 20, classes: tuple[int, ...] | None = PERSON_CLASSES) -> list:
    """`find_people` of several images queued on the device: one zero-argument function per image that gives its
    (boxes, scores, notes) once the candidates are on the host (the first call waits for them when no other copy
    has brought them)."""
    if not images:
        return []
    try:
        people = _queued(images, manager, score_threshold, nms_iou, max_people, classes)
    except CheckpointUnavailable as error:
        return [lambda image=image, error=error: _unavailable(image, error) for image in images]
    return [lambda i=i: people()[i] for i in range(len(images))]


def _queued(images, manager, score_threshold, nms_iou, max_people, classes):
    import torch
    import torchvision  # noqa: F401 - ultralytics' NMS takes torchvision's when it is imported (as in predict)
    from ultralytics.utils import nms, ops

    loaded = manager.get_detector()
    with loaded.lock:  # made once, by one thread
        net, letterboxes = _network(loaded)
    letterbox = letterboxes[len({image.shape for image in images}) == 1]  # predict's rule, below
    # Its letterbox, on the host as in predict. predict reads numpy images as BGR and turns its letterboxed copy to
    # RGB; the letterbox treats channels alike (a resize per channel, grey padding), so letterboxing our RGB frames
    # gives the same RGB input without the two channel flips (a 1080p frame's flipped copy cost 16x the letterbox)
    boxed = np.stack([letterbox(image=np.ascontiguousarray(image)) for image in images])  # no copy of a video frame
    side = boxed.shape[1:3]
    with loaded.lock, torch.inference_mode():
        x = ledger.to_device(boxed, loaded.device, non_blocking=True)  # pinned: no wait
        x = x.permute(0, 3, 1, 2).float().div_(255)  # predict's preprocess: RGB, 0-1
        raw = ledger.forward("detector", _first(net(ledger.off_device(x))), batch=False)
        candidates, end2end = _candidates(raw, float(score_threshold), classes)
    rider = Rider(candidates)
    found: list = []

    def people() -> list:
        if found:
            return found
        host = torch.from_numpy(rider.host())
        if not end2end and _incomplete(host, float(score_threshold)):  # more candidates than crossed: all of them
            host = _first_host(raw)
        # predict's NMS, without its time limit (a slow first call on a busy CPU would drop the frames after it)
        kept = nms.non_max_suppression(_as_prediction(host, end2end), float(score_threshold), float(nms_iou),
                                       list(classes) if classes is not None else None, max_det=MAX_DET,
                                       end2end=end2end, max_time_img=NO_TIME_LIMIT)
        for rows, image in zip(kept, images):
            rows[:, :4] = ops.scale_boxes(side, rows[:, :4], image.shape)
            boxes, scores = _kept(rows[:, :6], image.shape[:2], score_threshold, nms_iou, max_people, classes)
            found.append((boxes, scores, []) if len(boxes) else _nobody(image))
        return found

    return people


def _network(loaded):
    """The detector's torch module as predict runs it (fused, float32, eval, on the device) and predict's
    letterboxes (to 640 x 640 for images of several sizes, or with the least padding for images of one size);
    made once per loaded detector."""
    cached = getattr(loaded, "_device_detector", None)
    if cached is not None:
        return cached
    from ultralytics.data.augment import LetterBox

    net = loaded.model.model.to(loaded.device).float().eval()
    net = net.fuse(verbose=False) if hasattr(net, "fuse") else net  # predict's AutoBackend fuses the same module
    stride = max(int(net.stride.max()), 32) if hasattr(net, "stride") else 32
    # predict: 640, rect (the least padding) for images of one size, a PyTorch model
    letterboxes = (LetterBox(640, auto=False, stride=stride), LetterBox(640, auto=True, stride=stride))
    loaded._device_detector = (net, letterboxes)
    return loaded._device_detector


def _first(out):
    return out[0] if isinstance(out, (list, tuple)) else out


def _candidates(raw, score_threshold: float, classes):
    """(B, K, 6) float32 on the device: an end-to-end model's rows as they are; otherwise per frame the K best
    anchors (x, y, w, h, best class score, class; a class not asked for scores -1), in the anchors' order (as
    predict hands them to NMS: tied scores then break alike)."""
    import torch

    if raw.shape[-1] == 6:  # end-to-end (NMS-free): (B, 300, 6) already
        return raw.float().contiguous(), True
    boxes, conf, label = _anchors(raw)
    if classes is not None:
        wanted = torch.zeros(raw.shape[1] - 4, dtype=torch.bool, device=raw.device)
        wanted[list(classes)] = True
        conf = torch.where(wanted[label], conf, torch.full_like(conf, -1.0))
    index = conf.topk(min(CANDIDATES, conf.shape[1]), dim=1).indices.sort(dim=1).values
    best = conf.gather(1, index)
    boxes = boxes.gather(1, index[..., None].expand(-1, -1, 4))
    return torch.cat([boxes, best[..., None], label.gather(1, index)[..., None].float()], 2).contiguous(), False


def _anchors(raw):
    """Per anchor: (B, A, 4) boxes (x, y, w, h), and (B, A) its best class's score and that class (predict's pick)."""
    conf, label = raw[:, 4:].float().max(1)
    return raw[:, :4].float().transpose(1, 2), conf, label


def _incomplete(host, score_threshold: float) -> bool:
    """Whether every candidate of a frame scores above the threshold (more may lie beyond the K that crossed)."""
    return host.shape[1] >= CANDIDATES and bool((host[..., 4] > score_threshold).all(1).any())


def _first_host(raw):
    """Every anchor's (x, y, w, h, best score, class), copied back (a wait; rare, see _incomplete)."""
    import torch

    boxes, conf, label = _anchors(raw)
    return torch.cat([boxes, conf[..., None], label[..., None].float()], 2).cpu()


def _as_prediction(host, end2end: bool):
    """The candidates as the raw prediction ultralytics' NMS reads: (B, 4 + classes, K) with each anchor's score in
    its class's row (its best class, as predict picks), other classes 0; end-to-end rows as they are."""
    import torch

    if end2end:
        return host
    labels = host[..., 5].long()
    classes = int(labels.max()) + 1 if labels.numel() else 1
    scores = torch.zeros(*host.shape[:2], max(classes, 1), dtype=torch.float32)
    scores.scatter_(2, labels[..., None], host[..., 4:5].clamp_min(0))  # -1 (a class not asked for): 0
    return torch.cat([host[..., :4], scores], 2).transpose(1, 2).contiguous()
