"""What picking a pair changes in the form, in words, and the sampling it moves to: a pair's own
sampling (`models.pair.Preset.sampling`) replaces only a pair's own, never what a visitor set, and
the page says where it comes from."""

from __future__ import annotations

import gradio as gr

from ...core.registry import FEATURES, find, kinds, labels
from ...core.settings import RunSettings
from ...explain.gamma import gamma_for
from ...models.pair import PRESETS, pair_sampling, pick_device
from ..server import limits
from ..server.api import CHAT_PROMPT


def changes_line(preset, drafter, new_drafter, prompt, new_prompt) -> str:
    """What picking a pair changed in the form besides sampling, and why, in words ('' for nothing)."""
    said = []
    if new_drafter != drafter:
        why = "this pair has no draft model" if preset.draft is None else "the pair has it"
        said.append(f"Drafter: {labels().get(drafter, drafter)} → {labels()[new_drafter]} ({why}). ")
    if new_prompt != prompt:
        why = ("an instruct model answers a question" if new_prompt == CHAT_PROMPT
               else "the bundled pair continues Shakespeare")
        said.append(f"Prompt: the default for this pair ({why}); a prompt you type is kept. ")
    return "".join(said)


def _values(sampling) -> tuple:
    return sampling.temperature, sampling.top_k, sampling.top_p


def follow_sampling(preset_key, temperature, top_k, top_p) -> tuple[tuple, str]:
    """The sampling controls after picking a pair: the pair's own when they held some pair's own
    (the visitor had not set them), else as the visitor set them; and a sentence saying which."""
    own, current = _values(pair_sampling(preset_key)), (temperature, top_k, top_p)
    if current == own or None in current:
        return own, ""
    if any(current == _values(p.sampling) for p in PRESETS.values()):
        return own, f"Sampling: {described(current)} → {described(own)}, this pair's own (see beside the controls). "
    return tuple(gr.skip() for _ in current), (f"Sampling kept as you set it ({described(current)}); this pair's "
                                               f"own is {described(own)}. ")


def own_dtype(preset_key, device: str) -> str:
    """The precision a preset loads in by default on `device` (SPECDEC_DTYPE, where set, for all)."""
    preset = PRESETS.get(preset_key)
    chosen = preset.cpu_dtype if preset is not None and device.startswith("cpu") else "float32"
    return limits.DTYPE or chosen


def described(values) -> str:
    t, k, p = values
    return f"T = {t:g}, top-k {k}, top-p {p:g}"


def sampling_line(preset_key, drafter=None) -> str:
    """The short line beside the sampling controls: where a pair's sampling comes from, and the γ its
    measured costs pick for `drafter` (`gamma_line`)."""
    preset = PRESETS.get(preset_key)
    if preset is None or not preset.sampling_from:
        return ("Sampling: T = 1, top-k 0, top-p 1, the full distribution, where the residual shows best; "
                "change freely." + gamma_line(preset_key, drafter))
    return (f"Sampling: {preset.sampling_from} — change freely; T = 1, top-k 0, top-p 1 shows the residual best."
            + gamma_line(preset_key, drafter))


def gamma_line(preset_key, drafter=None) -> str:
    """Why γ starts where it does for a pair and `drafter` (None: its features drafter), at its own
    sampling (' ' and the pick's sentence; '' where nothing was measured for the pair): kept beside
    the controls, where a run does not write over it, as it does over the status line that says it
    when the pair is picked. A drafter without a card of its α (n-gram lookup) gets no pick and no
    prediction: the line says so rather than quote another drafter's."""
    preset = PRESETS.get(preset_key)
    if preset is None:
        return ""
    device = pick_device()[0]
    temperature, dtype = preset.sampling.temperature, own_dtype(preset_key, device)
    pick = gamma_for(preset_key, drafter or FEATURES.name, temperature, device, dtype)
    if pick is not None:
        return " " + pick.sentence()
    kind = find(drafter)
    if kind is None or kind.gamma_from_card or all(gamma_for(preset_key, k.name, temperature, device, dtype) is None
                                                   for k in kinds() if k.gamma_from_card):
        return ""   # nothing measured for this pair
    return (f" The {kind.word} drafter has no card of its α here: no γ is picked for it and no speed is predicted "
            "before a run (tick “compare with autoregressive” to measure one).")


def follow_gamma(preset_key, drafter, gamma, temperature, device: str | None = None, dtype: str | None = None
                 ) -> tuple:
    """γ after picking a pair: the γ its measured costs and its drafter's α predict best
    (`explain.gamma`), or the usual one where nothing was measured; replaced only where γ held some
    pair's own (the visitor had not set it), as sampling is. `dtype`: the loaded pair's (None: the
    preset's own on that device). Returns (γ or a skip, a sentence)."""
    usual, device = RunSettings().gamma, device or pick_device()[0]   # not loaded yet: where it will load
    pick = gamma_for(preset_key, drafter, temperature, device, dtype or own_dtype(preset_key, device))
    own = pick.gamma if pick is not None else usual
    # Any pair's own γ is replaced as the usual one is: its pick in its own precision or in float32
    # (where its own fell back), at this temperature or at the pair's own sampling's, where the page
    # picked it (a visitor who then moved T had still not set γ).
    picks = [gamma_for(key, kind.name, t, device, dt) for key in PRESETS for kind in kinds()
             if kind.gamma_from_card for dt in {own_dtype(key, device), "float32"}
             for t in {temperature, pair_sampling(key).temperature}]
    if gamma is None or gamma == own or gamma in {usual, *(p.gamma for p in picks if p is not None)}:
        said = "" if gamma in (None, own) else f"γ: {gamma:g} → {own}. "
        return own, said + (pick.sentence() + " " if pick is not None else "")
    return gr.skip(), f"γ kept as you set it ({gamma:g}). " + (pick.sentence() + " " if pick is not None else "")
