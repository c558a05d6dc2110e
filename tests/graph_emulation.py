"""A CUDA graph, emulated on the CPU: the engine's captured steps proven graph-safe without a GPU.

A CUDA graph runs its step once while recording the kernels, then replays them: every Python value
the step computed (an int read from a tensor, a branch taken, a shape) is frozen at capture, and the
replay reads only the current contents of the tensors it was given. `Emulator.capture` does the same
with aten ops (an `Emulator` is the engine's `capture`): it warms the step up as `Graphed` does, runs it once under a
TorchDispatchMode that records every op with its arguments (a tensor an earlier op made is named by
that op; any other tensor is kept by identity, as a graph keeps its address; everything else is a
constant), and from then on replays that tape instead of calling the Python function. A step that
depends on a Python value computed from data then gives different tokens from its twin that runs
the function every time (the static engine) and the eager decoder.

Two checks run while recording, as a graph capture would refuse them:
- a host read: an op that returns a Python number from a tensor (`_local_scalar_dense`: `.item()`,
  `int(t)`, `if t:`), an op whose output shape depends on data (`nonzero`, boolean-mask indexing,
  `masked_select`, `unique`), and, at the Python level (a TorchFunctionMode), `.cpu()`, `.tolist()`,
  `.numpy()`, `.item()` and copies to another device, which on a CPU tensor dispatch nothing;
- on every replay, each op's output must have the shape it had at capture.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten

# Ops whose output shape (or a Python value) depends on the data: a graph cannot hold them.
DATA_DEPENDENT = {"_local_scalar_dense", "nonzero", "nonzero_static", "masked_select", "unique", "_unique",
                  "_unique2", "unique_consecutive", "unique_dim", "equal", "is_nonzero", "item"}
# Python-level tensor methods that read a tensor on the host (on the CPU they dispatch nothing).
HOST_METHODS = {"cpu", "tolist", "numpy", "item", "__bool__", "__int__", "__float__", "__index__"}


@dataclass
class Emulator:
    """Counts what the emulated graphs did: captures, replays, and every host read or shape change
    they would have hit on a GPU (`problems`, with the op's name)."""

    captures: int = 0
    replays: int = 0
    problems: list[str] = field(default_factory=list)
    warmup: int = 2
    label: str = "emulated graphs"

    def __call__(self, fn):
        """What `Engine` calls in place of `static_cache.Graphed`."""
        self.captures += 1
        return _Tape(fn, self)


class _Record(TorchDispatchMode):
    """Records each aten op: (op, args and kwargs with tensors replaced by references, outputs)."""

    def __init__(self, problems: list[str]):
        super().__init__()
        self.ops, self.made, self.problems = [], {}, problems
        self.keep = []   # the recorded tensors stay alive, so no id is reused while recording

    def ref(self, x):
        """An argument as the tape keeps it: a tensor an earlier op made as `_Made`, any other
        tensor itself (a graph keeps its address), a list or tuple item by item, the rest as is."""
        if isinstance(x, torch.Tensor):
            return _Made(*self.made[id(x)]) if id(x) in self.made else x
        if isinstance(x, (list, tuple)):
            return type(x)(self.ref(i) for i in x)
        return x

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in DATA_DEPENDENT or (name == "index" and _has_bool_index(args)):
            self.problems.append(f"host read or data-dependent shape: aten.{name}")
        refs = self.ref(args), {k: self.ref(v) for k, v in kwargs.items()}   # before an in-place op renames its input
        out = func(*args, **kwargs)
        flat, _ = tree_flatten(out)
        if any(isinstance(o, (bool, int, float)) for o in flat) and name not in ("sym_size", "sym_numel", "dim"):
            self.problems.append(f"a Python value from a tensor: aten.{name}")
        index = len(self.ops)
        for k, o in enumerate(flat):
            if isinstance(o, torch.Tensor):
                self.made[id(o)] = (index, k)
                self.keep.append(o)
        self.ops.append((func, *refs, [o.shape if isinstance(o, torch.Tensor) else None for o in flat]))
        return out


def _has_bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else []
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or [])


class _HostReads(TorchFunctionMode):
    """Flags the Python-level reads of a tensor on the host that dispatch no aten op on a CPU."""

    def __init__(self, problems: list[str]):
        super().__init__()
        self.problems = problems

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        to_host = name == "to" and any(torch.device(a) != args[0].device for a in (*args[1:], *kwargs.values())
                                       if isinstance(a, (str, torch.device)))
        if name in HOST_METHODS or to_host:
            self.problems.append(f"host read: Tensor.{name}")
        return func(*args, **kwargs)


class _Tape:
    """One captured step: warmed up, recorded once, then replayed on the current tensor contents."""

    def __init__(self, fn, emulator: Emulator):
        self.emulator = emulator
        for _ in range(emulator.warmup):
            fn()
        recorder = _Record(emulator.problems)
        with _HostReads(emulator.problems), recorder:
            self.out = fn()
        self.ops = recorder.ops
        flat, self.spec = tree_flatten(self.out)
        self.out_refs = [recorder.ref(o) for o in flat]

    def __call__(self):
        self.emulator.replays += 1
        results: list[list] = []

        def resolve(x):
            if type(x) is _Made:
                return results[x.op][x.k]
            if type(x) in (list, tuple):
                return type(x)(resolve(i) for i in x)
            return x

        for func, args, kwargs, shapes in self.ops:
            out = func(*resolve(args), **{k: resolve(v) for k, v in kwargs.items()})
            flat, _ = tree_flatten(out)
            got = [o.shape if isinstance(o, torch.Tensor) else None for o in flat]
            if got != shapes:
                self.emulator.problems.append(f"shape changed on replay: aten.{func.overloadpacket.__name__}")
            results.append(flat)
        # A graph's outputs are its capture's tensors, overwritten by each replay.
        for mine, ref in zip(tree_flatten(self.out)[0], self.out_refs):
            new = resolve(ref)
            if new is not mine:
                mine.copy_(new)
        return self.out


class _Made:
    """The k-th output of the tape's op number `op`."""

    __slots__ = ("op", "k")

    def __init__(self, op: int, k: int):
        self.op, self.k = op, k
