"""Make docs/img/html-report.png: the HTML report of a regressed run, as a reviewer sees it.

Not run by CI. Re-run it from the repository root, in a venv with the ``example`` extra and
playwright, with Debian's Chromium at /usr/bin/chromium (``apt-get install chromium``):

    python scripts/make_screenshot.py

It copies example_golden/ to a scratch folder beside a conftest.py whose ``retriever`` is the
example's BM25 (the root conftest.py) without the stemmer, runs pytest there against the
shipped baseline -- the run fails on ndcg@10, which is the point -- and screenshots the
first screens of the report at 1200 px wide.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img" / "html-report.png"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: as tests/helpers.py starts it: as root, with no network
BROWSER_ARGS = [
    *("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"),
    *("--disable-background-networking", "--disable-component-update", "--disable-sync"),
]

CONFTEST = '''
import json
from pathlib import Path

import bm25s
import numpy as np
import pytest

CORPUS = Path(__file__).parent / "example_golden" / "cranfield" / "corpus.jsonl"


@pytest.fixture(scope="session")
def retriever():
    """The example's BM25, without its stemmer: a worse retriever than the baseline's."""
    docs = [json.loads(line) for line in CORPUS.open(encoding="utf-8") if line.strip()]
    ids = [str(doc["_id"]) for doc in docs]
    texts = ["\\n".join(p for p in (doc.get("title"), doc.get("text")) if p) for doc in docs]
    index = bm25s.BM25()
    index.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)

    def search(query, k):
        tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        scores = index.get_scores(tokens[0])
        top = np.lexsort((np.arange(len(ids)), -scores))[:k]
        return [
            {"id": ids[d], "text": texts[d], "score": float(scores[d])}
            for d in top.tolist()
            if scores[d] > 0
        ]

    return search
'''


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        shutil.copytree(ROOT / "example_golden", work / "example_golden")
        (work / "conftest.py").write_text(CONFTEST, encoding="utf-8")
        report = work / "report.html"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        command += ["--retrieval-golden", "example_golden/cranfield.json"]
        command += ["--retrieval-html", str(report)]
        done = subprocess.run(command, cwd=work, env=env, check=False)
        if done.returncode != 1 or not report.exists():  # 1: the gate failed, as it should
            sys.exit(f"pytest exited {done.returncode}: expected a failed gate and a report")
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 1500})
            page.goto(report.as_uri())
            page.screenshot(path=str(OUT))
            browser.close()
    print(f"{OUT.relative_to(ROOT)}: {OUT.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
