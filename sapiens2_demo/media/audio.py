"""The audio of a source video, carried into an output container in step with the video frames written.

Copied packet by packet when the output container takes the codec (`spec.audio_copy`), else re-encoded with
`spec.audio_encoder`; cut at `until` (output seconds) when the video was cut; output time 0 is the source's
first video frame. Used by `media.video.VideoSink`.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

log = logging.getLogger(__name__)


class AudioCopy:
    """The source's first audio track, fed into the output in step with the video (copied or re-encoded)."""

    def __init__(self, source, out, spec, until: float | None):
        self.source, self.out, self.until = source, out, until  # until: cut time in output seconds
        self.stream = source.streams.audio[0]
        video = source.streams.video[0] if source.streams.video else None
        # output time 0 is the source's first video frame (read_frames counts time from there too)
        self.offset = float(video.start_time * video.time_base) if video is not None and video.start_time else 0.0
        self.copy = self.stream.codec_context.name in spec.audio_copy
        if self.copy:
            self.out_stream = out.add_stream_from_template(self.stream)
        else:
            source_ctx = self.stream.codec_context
            rate = 48000 if spec.audio_encoder == "libopus" else source_ctx.sample_rate  # Opus only runs at 48k
            layout = "stereo" if source_ctx.channels >= 2 else "mono"
            self.out_stream = out.add_stream(spec.audio_encoder, rate=rate, layout=layout)
        self.packets = source.demux(self.stream)
        self.pending = None  # a packet read ahead, not yet due

    def mux_until(self, video_time: float) -> None:
        """Mux the packets that start before `video_time` (output seconds) and before the cut."""
        import av

        while True:
            packet, self.pending = self.pending, None
            if packet is None:
                try:
                    packet = next(self.packets)
                except (StopIteration, av.FFmpegError):  # a damaged tail loses only its own audio
                    self.packets = iter(())
                    return
            ts = packet.pts if packet.pts is not None else packet.dts
            if ts is None or not packet.size:  # the demuxer's end-of-stream marker
                continue
            time = float(ts * packet.time_base) - self.offset
            if self.until is not None and time >= self.until:
                self.packets = iter(())
                return
            if time >= video_time:
                self.pending = packet
                return
            self._mux(packet)

    def _mux(self, packet) -> None:
        if not self.copy:
            for frame in self.stream.codec_context.decode(packet):
                frame.pts -= round(self.offset / frame.time_base)
                self.out.mux(self.out_stream.encode(frame))
            return
        shift = round(self.offset / packet.time_base)
        packet.pts = packet.pts - shift if packet.pts is not None else None
        packet.dts = packet.dts - shift if packet.dts is not None else None
        packet.stream = self.out_stream
        self.out.mux(packet)

    def finish(self) -> None:
        self.mux_until(math.inf)
        if not self.copy:
            self.out.mux(self.out_stream.encode(None))  # flush the encoder

    def close(self) -> None:
        self.source.close()


def open_audio_copy(path: Path, out, spec, until: float | None) -> AudioCopy | None:
    """An AudioCopy of `path`'s audio into `out`, or None when it has none (or cannot be opened)."""
    import av

    try:
        source = av.open(str(path))
    except av.FFmpegError:
        log.warning("Could not open %s for its audio; the output has no sound.", path.name)
        return None
    if not source.streams.audio:
        source.close()
        return None
    return AudioCopy(source, out, spec, until)
