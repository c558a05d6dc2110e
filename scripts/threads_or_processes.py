"""Time two runs at once: in two threads of one process (how the server decodes a run that has no
worker) or in two processes (the decode workers, `app/server/workers.py`), to choose between them. Times one run alone,
then two at once each way, on one torch thread per run, as the app decodes.

    python scripts/threads_or_processes.py --preset smollm2-135m      # the real model
    python scripts/threads_or_processes.py --preset bundled           # the bundled pair

The decode workers exist because a small model's run is mostly Python, and threads of one process
take turns at its GIL. A large model's run is mostly matrix products, which torch computes with the
GIL released: there two threads may do as well as two processes, which hold the model twice.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import threading
import time

PROMPTS = ("How do I make a good cup of tea?", "Explain why the sky is blue.")


def _settings(args, seed: int):
    from specdec import RunSettings
    from specdec.core.sampling import SamplingConfig

    return RunSettings(gamma=4, max_new_tokens=args.tokens, seed=seed, drafter=args.drafter,
                       sampling=SamplingConfig(temperature=1.0))


def _load(args):
    import torch

    from specdec import load_pair

    torch.set_num_threads(1)
    return load_pair(preset=args.preset, device="cpu")


def _timed(pair, args, i: int) -> float:
    from specdec import speculative_generate

    t0 = time.perf_counter()
    speculative_generate(pair, PROMPTS[i % 2], _settings(args, i))
    return time.perf_counter() - t0


def _in_process(args, i: int, start, out) -> None:
    pair = _load(args)
    _timed(pair, args, i)   # warm
    start.wait()
    out.put(_timed(pair, args, i))


def _at_once(target, count: int) -> float:
    """Seconds until every one of `count` calls of `target(i)`, started together, has ended."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="smollm2-135m")
    ap.add_argument("--drafter", default="features")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)

    pair = _load(args)
    for i in range(2):
        _timed(pair, args, i)   # warm
    for repeat in range(args.repeats):
        alone = sum(_timed(pair, args, i) for i in range(2))
        threads = _at_once(lambda i: _timed(pair, args, i), 2)
        start, out = mp.Barrier(3), mp.Queue()
        procs = [mp.Process(target=_in_process, args=(args, i, start, out)) for i in range(2)]
        for p in procs:
            p.start()
        start.wait()
        t0 = time.perf_counter()
        for _ in procs:
            out.get()
        processes = time.perf_counter() - t0
        for p in procs:
            p.join()
        print(f"{args.preset}, {args.tokens} tokens, repeat {repeat + 1}: the two runs one after the other "
              f"{alone:.2f} s; at once in two threads {threads:.2f} s ({alone / threads:.2f}x the throughput); "
              f"in two processes {processes:.2f} s ({alone / processes:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
