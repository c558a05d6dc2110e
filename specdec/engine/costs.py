"""What the engine's steps cost, timed on the device: the medians the bench, `gpu-check` and the
speed explorer predict with (`step_costs`), and a round's own draft and verify seconds (`Timer`)."""

from __future__ import annotations

import time

import torch

from ..core.sampling import DeviceSampling, Rule, SamplingConfig


class Timer:
    """Seconds between marks: CUDA events on a GPU (no sync until the round's own), else the clock."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks = [self._now()]

    def _now(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def mark(self) -> None:
        self.marks.append(self._now())

    def seconds(self) -> tuple[float, ...]:
        if self.cuda:
            return tuple(a.elapsed_time(b) / 1000 for a, b in zip(self.marks, self.marks[1:]))
        return tuple(b - a for a, b in zip(self.marks, self.marks[1:]))


def _median_ms(fn, repeats: int, device: torch.device) -> float:
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1000)
    return sorted(times)[len(times) // 2]


@torch.inference_mode()
def step_costs(engine, context: list[int], widths: list[int], sampling: SamplingConfig, repeats: int = 50) -> dict:
    """Median milliseconds, on `engine`, of one draft step, one target step (the target
    alone's token), and one verify of each width (its test and residual included): the costs
    the bench, `gpu-check` and the speed explorer predict with. Each call is timed with a
    device sync around it."""
    gamma = max(widths) - 1
    with engine.lock:
        engine.start(len(context) + gamma + 2, max(gamma, 1))
        s, last = engine._slots, len(context) - 1
        engine._catch_up(s.target, context, last, "t_valid")
        s.target.start.fill_(last)
        if s.draft is not None:   # a pair with no draft model has no draft step to time
            engine._catch_up(s.draft, context, last, "d_valid")
            s.draft.start.fill_(last)
        for buf in (s.t_in, s.d_in, s.drafts):
            buf.fill_(context[-1])
        s.q_rows.fill_(1.0 / s.vocab)
        s.uniforms.fill_(0.5)
        s.u_one.fill_(0.5)
        s.numbers.set(sampling)
        shape = DeviceSampling.shape(sampling)
        timed = {"draft_step_ms": _median_ms(lambda: engine._run(("draft", 1, shape), engine._draft_fn),
                                             repeats, engine.device) if s.draft is not None else None,
                 "target_step_ms": _median_ms(lambda: engine._run(("step", shape), engine._step_fn),
                                              repeats, engine.device)}
        by_width = {1: timed["target_step_ms"]}
        for w in widths:
            if w > 1:
                key = ("verify", w - 1, shape, Rule.EXACT, False, None)
                by_width[w] = _median_ms(lambda key=key: engine._run(key, engine._verify_fn), repeats, engine.device)
        engine.t_valid = engine.d_valid = 0   # the timing wrote past the context: the next run starts afresh
    return {**timed, "target_ms_by_width": by_width,
            "c": timed["draft_step_ms"] / timed["target_step_ms"] if s.draft is not None else None,
            "engine": engine.name}
