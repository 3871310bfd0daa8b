"""Small device tensors that cross to the host in another copy back (`device_post.to_host` takes them along): one
wait for both. The next chunk's person boxes ride with this batch's keypoints (detect_device.py)."""

from __future__ import annotations

import threading

import numpy as np


class Rider:
    """A small device tensor that crosses to the host in the next `to_host` copy on its device (one wait for both),
    or in a copy of its own when it is asked for first (`host`). The next chunk's person boxes ride with this
    batch's keypoints. On CUDA an event marks when the tensor is ready, so a copy on another stream waits for it on
    the device, not on the host."""

    _waiting: list = []  # process-wide: any copy back of the same device and dtype may take them
    _lock = threading.Lock()

    def __init__(self, tensor):
        import torch

        self.tensor, self._host, self.ready, self._arrived = tensor, None, None, threading.Event()
        if tensor.is_cuda:
            self.ready = torch.cuda.Event()
            self.ready.record()  # on the stream that made it
        with Rider._lock:
            Rider._waiting.append(self)

    @classmethod
    def board(cls, like) -> list:
        """The riders that can cross with `like`'s copy (its device and dtype), taken off the waiting list, the
        current stream made to wait (on the device) until they are ready."""
        import torch

        if not cls._waiting:
            return []
        with cls._lock:
            riders = [r for r in cls._waiting if r.tensor.device == like.device and r.tensor.dtype == like.dtype]
            cls._waiting = [r for r in cls._waiting if r not in riders]
        for rider in riders:
            if rider.ready is not None:
                torch.cuda.current_stream(like.device).wait_event(rider.ready)
        return riders

    @classmethod
    def unboard(cls, riders: list) -> None:
        """Riders back on the waiting list (the copy they boarded failed)."""
        with cls._lock:
            cls._waiting.extend(riders)
        for rider in riders:
            rider._arrived.set()

    def arrive(self, array: np.ndarray) -> None:
        self._host = array
        self._arrived.set()

    def host(self) -> np.ndarray:
        """The tensor on the host: from the copy it rode in, else copied now (a wait)."""
        with Rider._lock:
            alone = self in Rider._waiting
            if alone:
                Rider._waiting.remove(self)
        if alone:
            import torch

            if self.ready is not None:
                torch.cuda.current_stream(self.tensor.device).wait_event(self.ready)
            from ..models.inference import copy_back

            self._host = copy_back(self.tensor).numpy()
            return self._host
        self._arrived.wait()  # boarded another thread's copy: until it comes back
        return self._host if self._host is not None else self.host()  # that copy failed: on its own
