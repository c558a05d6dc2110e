"""Refresh the README's screenshots in assets/screenshots/ (the tests never write there).

    python scripts/screenshots.py            # about 2 minutes on 2 cores; needs Debian's chromium
    python scripts/screenshots.py --out DIR  # somewhere else, to look before you replace
    python scripts/screenshots.py --bench-chart runs/bench/speedup.html   # only the bench's chart

It runs the browser tests that take the pictures (pytest -m screenshot) against a real
`python app.py`, with SPECDEC_SCREENSHOTS pointing at the folder: a picture is only taken on a page
whose test passes. Then look at them (`git diff --stat assets/screenshots`) and commit the ones you
want. assets/screenshots/bench-speedup.png is the bench's chart, not a page: `--bench-chart` draws it
from a `python -m specdec bench` run's speedup.html (and takes no other picture).
Exit status: pytest's (0 when every screenshot test passed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/screenshots.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "assets" / "screenshots"),
                        help="folder for the pictures (default: assets/screenshots, the README's)")
    parser.add_argument("--bench-chart", metavar="HTML", default=None,
                        help="draw bench-speedup.png from this speedup.html (a `specdec bench` run's) instead")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.bench_chart:
        return bench_chart(Path(args.bench_chart), out / "bench-speedup.png")
    env = {**os.environ, "SPECDEC_SCREENSHOTS": str(out), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "screenshot"],
                          cwd=ROOT, env=env).returncode
    if code == 0:
        print(f"screenshots written to {out}")
    return code


def bench_chart(html: Path, png: Path) -> int:
    """The bench's chart as the README shows it: the page drawn by Debian's chromium, plot only."""
    from playwright.sync_api import sync_playwright

    chromium = next((p for p in ("/usr/lib/chromium/chromium", "/usr/bin/chromium") if Path(p).exists()), None)
    if not html.is_file() or chromium is None:
        print(f"needs {html} (run `python -m specdec bench`) and Debian's chromium", file=sys.stderr)
        return 2
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 700})
        page.goto(html.resolve().as_uri())
        page.wait_for_selector(".main-svg")
        page.locator(".plotly-graph-div").first.screenshot(path=str(png))
        browser.close()
    print(f"bench chart written to {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
