"""Sapiens2 308-keypoint pose: detection, batched crops with flip test, fast DARK-UDP decoding, exports."""

from .boxes import parse_boxes
from .decode import dark_udp, decode_heatmaps
from .detector import detect_people, find_people
from .formats import (read_coco17, read_official_json, read_openpose, to_coco17, to_official_json, to_openpose,
                      write_exports)
from .pipeline import estimate_pose

__all__ = ["parse_boxes", "dark_udp", "decode_heatmaps", "detect_people", "find_people", "estimate_pose",
           "to_official_json", "to_coco17", "to_openpose", "write_exports", "read_official_json",
           "read_coco17", "read_openpose"]
