"""A check shared by the server tests (test_server*.py): the server still answers a short run."""

from __future__ import annotations

import time

from serverload import client, generate

SERVING_SECONDS = 30   # a 4-token run, queue and all, on a loaded 2-core machine takes a few seconds


def assert_serving(server) -> None:
    t0 = time.perf_counter()
    out = generate(client(server.url), max_new_tokens=4, seed=11)
    assert str(out["status"]).startswith("Done: 4 tokens"), out["status"]
    assert time.perf_counter() - t0 < SERVING_SECONDS
