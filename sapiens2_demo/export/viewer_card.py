"""A card for an empty 3D viewer: a flat .glb that says what a run will show there.

The app's 3D viewers always hold a model: before a run, and after a run that made none, they show this card
(gradio 6.31's Model3D draws nothing when a viewer that had no model, or was hidden, gets one; see
ui/viewers.py). The card is a quad in the glTF frame (y up, facing +z, the viewer's side) whose text is its
emissive texture, so the viewer's lights neither darken nor tint it; its background is the viewers' clear
colour, so only the text and a thin frame show.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..util import atomic_write

CARD_PIXELS = (1024, 400)
BACKGROUND = (26, 26, 26)  # the viewers' clear colour (0.1, 0.1, 0.1)


def card_picture(title: str, hint: str = "", size: tuple[int, int] = CARD_PIXELS):
    """The card's texture: the title, the hint under it (both centred), a thin rounded frame."""
    from PIL import Image, ImageDraw, ImageFont

    width, height = size
    picture = Image.new("RGB", size, BACKGROUND)
    draw = ImageDraw.Draw(picture)
    draw.rounded_rectangle([4, 4, width - 5, height - 5], radius=28, outline=(95, 95, 95), width=5)
    lines = [(title, ImageFont.load_default(size=height * 0.13), (235, 235, 235))]
    lines += [(hint, ImageFont.load_default(size=height * 0.095), (170, 170, 170))] if hint else []
    step = height * 0.19
    top = height / 2 - step * (len(lines) - 1) / 2
    for i, (text, font, colour) in enumerate(lines):
        draw.text((width / 2, top + i * step), text, fill=colour, font=font, anchor="mm")
    return picture


def card_mesh(title: str, hint: str = ""):
    """The card as a textured trimesh quad, 1 unit tall, in the glTF frame."""
    import trimesh

    picture = card_picture(title, hint)
    half = np.array([picture.width / picture.height, 1.0]) / 2
    corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], np.float32)
    vertices = np.column_stack([corners * half, np.zeros(4)]).astype(np.float32)
    uv = (corners + 1) / 2
    material = trimesh.visual.material.PBRMaterial(
        baseColorFactor=[0, 0, 0, 255], emissiveTexture=picture, emissiveFactor=[1.0, 1.0, 1.0],
        metallicFactor=0.0, roughnessFactor=1.0, doubleSided=True)
    return trimesh.Trimesh(vertices, np.array([[0, 1, 2], [0, 2, 3]]), process=False,
                           visual=trimesh.visual.TextureVisuals(uv=uv, material=material))


def write_card_glb(path: str | Path, title: str, hint: str = "") -> Path:
    """Write the card to `path` (atomically) and return the path."""
    import trimesh

    path = Path(path)
    with atomic_write(path) as partial:
        partial.write_bytes(trimesh.Scene(card_mesh(title, hint)).export(file_type="glb"))
    return path
