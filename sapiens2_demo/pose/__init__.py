"""Sapiens2 308-keypoint pose building blocks: keypoint metadata, person detection, boxes and crops, DARK-UDP
decoding, tracking and smoothing. The batched pipeline is `pipelines/pose.py`; the file formats `export/`."""
