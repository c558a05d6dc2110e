"""What one command holds and measures on this machine: the torch threads its runs take, and the
costs its γ pick reads (`core.threads`, `explain.calibrate`)."""

from __future__ import annotations

import sys


def hold_threads(pair) -> int | None:
    """The torch threads this command's runs take (`core.threads`: --threads, else the cores free now),
    fixed until the command ends (`main` releases it); None on a GPU."""
    import torch

    from ..core import threads

    if pair.device != "cpu":
        return None
    count = threads.threads_for_model(pair.target)
    threads.fix(count)
    torch.set_num_threads(count)
    return count


def measure_here(pair, preset: str, drafter: str) -> None:
    """A real model's costs on this machine, measured once (then kept in the user's cache): the γ pick
    reads them (`explain.calibrate`)."""
    from ..core.registry import find
    from ..explain import calibrate
    from ..models.pair import PRESETS

    kind = find(drafter)
    if PRESETS.get(preset) and PRESETS[preset].source and kind and kind.gamma_from_card and pair.device == "cpu":
        if calibrate.stored(preset, drafter, "cpu", str(pair.dtype).replace("torch.", "")) is None:
            print("measuring what this model costs a round on this machine (about fifteen seconds, once)",
                  file=sys.stderr)
        calibrate.profile_here(pair, preset, drafter)
