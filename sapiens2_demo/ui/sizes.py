"""The size menus mark what this server cannot load, with a short reason: a size can be loaded from disk
(--checkpoint-dir) or the Hugging Face cache, or from the hub when it can be reached, and only when its weights fit
the model memory budget. Unavailable sizes stay valid values: the API accepts every size it always did and answers
an unavailable one with a message."""

from __future__ import annotations

import os

import gradio as gr

from ..models.registry import TASKS, checkpoint

PARAMS = {"0.1b": 0.114e9, "0.4b": 0.4e9, "0.8b": 0.8e9, "1b": 1.0e9, "5b": 5.0e9}  # approximate parameter counts


def _cached(ckpt) -> bool:
    from huggingface_hub import try_to_load_from_cache

    for revision in filter(None, (ckpt.revision, ckpt.fallback_revision)):
        try:
            if isinstance(try_to_load_from_cache(ckpt.repo_id, "config.json", revision=revision), str):
                return True
        except Exception:  # noqa: BLE001 - a broken cache entry just means "not cached"
            continue
    return False


def unavailable_reason(manager, family: str, size: str) -> str | None:
    """None when this server can load facebook/sapiens2-{family}-{size}; else a short reason for a visitor."""
    ckpt = checkpoint(family, size)
    itemsize = getattr(manager.dtype, "itemsize", 4)
    needed = PARAMS.get(size, 0) * itemsize
    if needed > manager.memory_budget_bytes:
        return "too large for this server's memory"
    if manager.local_path(ckpt) is not None or _cached(ckpt):
        return None
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    return "not on this server" if offline else None


def size_menu(manager, families, sizes, label: str = "Model size", value: str | None = None) -> gr.Dropdown:
    """A size dropdown for the tasks of `families`: a size is marked unavailable (with the reason) unless every
    family that has it can load it. Every size stays a valid value, so the API accepts what it always did."""
    reasons = {}
    for size in sizes:
        for family in families:  # a family the registry does not know (a model-free task) loads nothing
            if family in TASKS and size in TASKS[family].sizes:
                reason = unavailable_reason(manager, family, size)
                if reason is not None:
                    reasons[size] = reason
                    break
    default = sizes[0]
    sizes = sorted(sizes, key=lambda size: PARAMS.get(size, 0))  # shown small to large
    choices = [(f"{size} ({reasons[size]})" if size in reasons else size, size) for size in sizes]
    offered = [size for size in sizes if size not in reasons] or list(sizes)
    chosen = value if value in offered else default if default in offered else offered[0]
    return gr.Dropdown(choices, value=chosen, label=label, interactive=len(sizes) > 1)
