"""Fixtures of the system tests: the browser tests' Chromium page on the app (one per test module), and what they
read from a 3D viewer's canvas."""

import io
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

# What lies over a shown depth picture's colour-bar labels (the right-hand 65 % of the bar's `bar` px, in the
# picture's own pixels, as the page scales it): page.evaluate(OVER_THE_BAR, [selector of the img or video, bar]).
# Left out: a video player's own controls (shown only while the pointer is on the video) and anything under 6x6 px
# (an empty toolbar stays a 3 px white box in the corner).
OVER_THE_BAR = """([selector, bar]) => {
    const v = document.querySelector(selector), r = v.getBoundingClientRect();
    const [natural_w, natural_h] = [v.videoWidth || v.naturalWidth, v.videoHeight || v.naturalHeight];
    if (!natural_w || !natural_h) return ['nothing shown yet'];
    const s = Math.min(r.width / natural_w, r.height / natural_h), w = natural_w * s, h = natural_h * s;
    const left = r.left + (r.width - w) / 2, top = r.top + (r.height - h) / 2, over = new Set();
    for (let x = left + w - bar * s * 0.65; x < left + w - 1; x += 2)
        for (let y = top + 1; y < top + h - 1; y += 2) {
            const e = document.elementFromPoint(x, y);
            if (!e) { over.add('off the page'); continue; }
            const box = e.getBoundingClientRect();
            if (e !== v && !e.closest('.controls') && box.width >= 6 && box.height >= 6)
                over.add(`${e.tagName} ${e.className.baseVal ?? e.className} ${e.getAttribute('aria-label') || ''}`);
        }
    return [...over];
}"""


@pytest.fixture(scope="module")
def app_url(app_server):
    return app_server[1]


@pytest.fixture(scope="module")
def page(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(app_url, wait_until="domcontentloaded")
        page.get_by_role("tab", name="Pose", exact=True).wait_for(timeout=60_000)
        yield page
        browser.close()


def canvas_picture(page, viewer: str) -> np.ndarray | None:
    """The viewer's canvas as pixels, or None while there is no canvas at least 200 px tall."""
    canvas = page.locator(f"#{viewer} canvas")
    if not canvas.count():
        return None
    box = canvas.first.bounding_box()
    if not box or box["height"] < 200:
        return None
    return np.asarray(Image.open(io.BytesIO(canvas.first.screenshot())).convert("RGB"))


def distinct_colours(picture: np.ndarray) -> int:
    return len(np.unique(picture.reshape(-1, 3), axis=0))


def drawn_share(picture: np.ndarray) -> float:
    """The share of the canvas that is not its clear colour (the corner pixel): 0 for an empty scene."""
    background = picture[2, 2].astype(int)
    return float((np.abs(picture.astype(int) - background).max(axis=2) > 12).mean())


def drawn(picture: np.ndarray | None) -> bool:
    return picture is not None and distinct_colours(picture) >= 50 and drawn_share(picture) >= 0.005


def wait_for_drawing(page, viewer: str, model_name: str, previous_href: str | None, previous: np.ndarray | None,
                     timeout_s: float = 90) -> tuple[np.ndarray, str]:
    """Wait until the viewer offers a new model named `model_name` and its canvas shows it: visible, at least
    200 px tall, many distinct colours (an empty scene is one clear colour), and not the previous picture."""
    link = page.locator(f'#{viewer} a[data-testid="model3d-download-link"]')
    deadline = time.monotonic() + timeout_s
    href, seen = None, None
    while time.monotonic() < deadline:
        href = link.first.get_attribute("href") if link.count() else None
        if href and model_name in href and href != previous_href:
            seen = canvas_picture(page, viewer)
            if drawn(seen) and (
                    previous is None or seen.shape != previous.shape or np.abs(
                        seen.astype(int) - previous.astype(int)).mean() > 1):
                return seen, href
        page.wait_for_timeout(500)
    if seen is not None:
        Image.fromarray(seen).save(Path(os.environ.get("SAPIENS2_SCREENSHOTS", "/tmp")) / f"{viewer}-failed.png")
    raise AssertionError(f"{viewer} did not draw {model_name}: link {href!r}, canvas "
                         f"{None if seen is None else (seen.shape, distinct_colours(seen), drawn_share(seen))}")


CARD = "sapiens2-viewer-card-"  # an empty viewer's model (ui/viewers.py)


def wait_for_card(page, viewer: str) -> tuple[np.ndarray, str]:
    """The viewer's card, drawn, with no download button (a card is not a download)."""
    picture, href = wait_for_drawing(page, viewer, CARD, None, None)
    assert not page.locator(f'#{viewer} a[data-testid="model3d-download-link"]').first.is_visible()
    return picture, href
