"""Fixtures of the system tests: the browser tests' Chromium page on the app (one per test module)."""

import shutil

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


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
