"""Refresh the README's screenshots in assets/screenshots/ (the tests never write there).

    python scripts/screenshots.py            # about 3 minutes on 2 cores; needs Debian's chromium
    python scripts/screenshots.py --out DIR  # somewhere else, to look before you replace

It runs the browser tests that take the pictures (pytest -m screenshot) against a real
`python app.py`, with SPECDEC_SCREENSHOTS pointing at the folder: a picture is only taken on a page
whose test passes. Then look at them (`git diff --stat assets/screenshots`) and commit the ones you
want. assets/screenshots/bench-speedup.png is the bench's chart, not a page: it is not redrawn here.
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
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPECDEC_SCREENSHOTS": str(out), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "screenshot"],
                          cwd=ROOT, env=env).returncode
    if code == 0:
        print(f"screenshots written to {out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
