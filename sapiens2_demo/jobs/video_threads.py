"""The threads around the model in a video job: `Decoder` decodes ahead of it, `Writer` renders, encodes and
exports behind it; each with a bounded queue, so memory stays flat whatever the video's length."""

from __future__ import annotations

import queue
import threading

from ..render.frames import grid, picture

_END = object()


def tapered(size: int, remaining: int, smallest: int) -> int:
    """The next list's size: `size`, or half of what remains (rounded up to `smallest`'s multiple) near the end."""
    if remaining <= 0:
        return size
    half = -(-remaining // 2)
    return max(smallest, min(size, -(-half // smallest) * smallest))


class Decoder:
    """Decodes ahead of the model in a thread; `batches()` hands out lists of Frames."""

    def __init__(self, path, stride, max_duration, max_side, batch_size):
        from ..media.video import read_frames

        self.batch_size = batch_size
        self._queue: queue.Queue = queue.Queue(maxsize=2 * batch_size)
        self._stop = threading.Event()
        self._frames = read_frames(path, stride=stride, max_duration=max_duration, max_side=max_side)
        self._thread = threading.Thread(target=self._work, name="video-decode", daemon=True)
        self._thread.start()

    def _work(self):
        try:
            for frame in self._frames:
                if not self._put(frame):
                    return
            self._put(_END)
        except BaseException as error:  # noqa: BLE001 - handed to the consumer
            self._put(error)

    def _put(self, item) -> bool:
        """Queue `item` unless the consumer stopped first (then False): never block a stopped run."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def batches(self, expected: int = 0, smallest: int = 0):
        """Lists of `batch_size` frames. With `smallest` (a video in this process on a CPU), the first ones double
        from it (the first progress, and its time left, after one forward, not a whole chunk: minutes with the
        released models on a CPU), and with `expected` (the frames the container says it holds) the last ones
        halve as the end nears, so what is drawn and encoded after the last forward is a couple of frames (2, 4,
        8, 16, 10, 4, 2, 2 for 48 frames). Past `expected` (a container that said too few), `batch_size` again."""
        def next_size() -> int:  # the next list's, from the frames handed out and the lists so far
            if not smallest:
                return self.batch_size
            return min(tapered(self.batch_size, expected - handed, smallest), smallest << min(count, 16))

        batch, handed, count = [], 0, 0
        size = next_size()
        while True:
            item = self._queue.get()
            if item is _END:
                break
            if isinstance(item, BaseException):
                raise item
            batch.append(item)
            if len(batch) >= size:
                handed += len(batch)
                count += 1
                yield batch
                batch = []
                size = next_size()
        if batch:
            yield batch

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)


class Writer:
    """Renders, encodes and exports behind the model in a thread (bounded queue: memory stays flat)."""

    def __init__(self, renderers: dict, titles: dict, sink, exports: dict, recording=None):
        self.renderers, self.titles, self.sink, self.exports = renderers, titles, sink, exports
        self.recording = recording  # every task's results per frame (the Rerun recording), or None
        self._queue: queue.Queue = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="video-encode", daemon=True)
        self._thread.start()

    def put(self, frames, results):
        self._raise()
        self._queue.put((frames, results))

    def _work(self):
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if self._error is not None:
                continue  # drain after a failure; the main loop raises it
            frames, results = item
            try:
                for i, frame in enumerate(frames):
                    pictures = [(self.titles[task], picture(renderer, frame.rgb, results[task][i]))
                                for task, renderer in self.renderers.items()]
                    self.sink.write(pictures[0][1] if len(pictures) == 1 else grid(frame.rgb, pictures), frame.time)
                    for task, export in self.exports.items():
                        export.add(frame.index, frame.time, frame.rgb, results[task][i])
                    if self.recording is not None:
                        self.recording.add(frame.index, frame.time, frame.rgb,
                                           {task: answers[i] for task, answers in results.items()})
            except BaseException as error:  # noqa: BLE001 - re-raised in the main loop
                self._error = error

    def _raise(self):
        if self._error is not None:
            raise self._error

    def finish(self):
        self._queue.put(_END)
        self._thread.join()
        self._raise()

    def stop(self):
        self._error = self._error or RuntimeError("stopped")  # the thread now drains without working
        while self._thread.is_alive():
            try:
                self._queue.put(_END, timeout=0.1)
                break
            except queue.Full:
                continue
        self._thread.join(timeout=10)
