"""Batch processing: images, folders and videos through the app's pipelines and exporters, resumable, on
this machine (`local`) or a Ray cluster (`ray`). The command is `python -m sapiens2_demo.cli`."""

from .inputs import InputError, InputItem, discover
from .manifest import MANIFEST_NAME, Record, read_manifest
from .options import BatchOptions, parse_tasks
from .report import Summary
from .runner import ENGINES, run

__all__ = ["run", "BatchOptions", "parse_tasks", "discover", "read_manifest", "Record", "Summary", "InputItem",
           "InputError", "MANIFEST_NAME", "ENGINES"]
