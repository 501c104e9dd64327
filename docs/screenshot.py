"""Take docs/screenshot.png of the web page of a running service (Debian's chromium, headless).

    .venv/bin/attend serve &                       # on the shared catalog
    .venv/bin/python docs/screenshot.py http://127.0.0.1:8000 "a boy wizard at a school of magic"

Searches, likes the top two results, opens the top one's explanation, then saves the page.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("query")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("screenshot.png"))
    args = parser.parse_args()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(args.url)
        page.fill("#q", args.query)
        page.press("#q", "Enter")
        hits = page.locator("#results .hit")
        expect(hits.first).to_be_visible(timeout=60_000)
        for i in (0, 1):
            hits.nth(i).locator(".like").click()
        expect(page.locator("#recommendations li").first).to_be_visible(timeout=60_000)
        hits.first.click()
        expect(page.locator("#explanation mark").first).to_be_visible(timeout=60_000)
        expect(page.locator("#similar li").first).to_be_visible(timeout=60_000)
        page.screenshot(path=str(args.out), full_page=True)
        browser.close()


if __name__ == "__main__":
    main()
