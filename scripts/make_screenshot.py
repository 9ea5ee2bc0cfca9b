"""Make docs/img/html-report.png: the HTML report of a pull request that regressed.

The change under review is the example's BM25 without its stemmer: a copy of the example
(``conftest.py`` with ``stemmer = None``, ``example_golden/`` with its committed baseline) runs
in a temporary folder, so ndcg@10 regresses against the baseline and the page opens on its
"what changed" panel. The page is photographed in headless Chromium at 1200 px wide (the
first screen and a half) and saved as an optimised PNG. Not run by CI; re-run it by hand
after a change to the HTML report, from the repository root, with the ``example`` and
``dev`` extras (bm25s, PyStemmer, playwright) and Debian's ``chromium`` installed::

    python scripts/make_screenshot.py          # writes docs/img/html-report.png
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img" / "html-report.png"
WIDTH, HEIGHT = 1200, 1350  # CSS pixels: the header, what changed, the metric table
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run"]
BROWSER_ARGS += ["--disable-background-networking", "--disable-component-update"]


def regressed_report(folder: Path) -> Path:
    """Run the example without its stemmer in ``folder``; the HTML report's path."""
    shutil.copytree(ROOT / "example_golden", folder / "example_golden")
    conftest = (ROOT / "conftest.py").read_text(encoding="utf-8")
    before = 'stemmer = Stemmer.Stemmer("english")'
    assert before in conftest, "the example's conftest.py changed: update this script"
    (folder / "conftest.py").write_text(conftest.replace(before, "stemmer = None"), "utf-8")
    html = folder / "report.html"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"]
    command += ["--retrieval-golden", "example_golden/cranfield.json"]
    command += ["--retrieval-html", str(html)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode != 1 or not html.is_file():  # 1: the regression this page is about
        sys.exit(f"expected a failed gate with a report, got {done.returncode}:\n{done.stdout}")
    return html


def screenshot(html: Path) -> bytes:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(html.as_uri())
        png = page.screenshot()
        browser.close()
    return png


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        png = screenshot(regressed_report(Path(scratch)))
    image = Image.open(io.BytesIO(png)).convert("RGB")
    image = image.quantize(colors=128, method=Image.Quantize.MEDIANCUT)  # flat UI colours
    image.save(OUT, optimize=True)
    print(f"{OUT.relative_to(ROOT)}: {image.width}x{image.height}, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
