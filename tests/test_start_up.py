"""What the server's start-up leaves behind: its objects out of later garbage collections."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# In a process of its own: freezing is for the whole process, and this test process's objects
# (earlier tests' pairs among them) must stay collectable.
WARM = """
import gc, json, torch
torch.set_num_threads(1)
from specdec.app.page.layout import build_app
from specdec.app.server.pairs import get_pair
from specdec.app.server.runs import warm_up
from specdec.app.server.serving import configure
demo = configure(build_app())
pair = get_pair("bundled")
walked_before = len(gc.get_objects())   # what a full collection walks: every tracked object not frozen
warm_up(pair)
print(json.dumps(dict(walked_before=walked_before, walked_after=len(gc.get_objects()),
                      frozen=gc.get_freeze_count())))
"""


def test_after_warm_up_a_full_collection_walks_none_of_what_start_up_made():
    """A full garbage collection walks every tracked object that is not frozen: about 530,000 in a
    started server, 250 ms with the decode and the page's events stopped. After the warm-up it
    walks under a hundredth of that: start-up's objects are frozen (`device_queue.freeze_start_up`)."""
    env = {**os.environ, "SPECDEC_DECODE_PROCESSES": "0", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", WARM], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["walked_after"] < counts["walked_before"] / 100, counts
