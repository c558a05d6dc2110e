"""What picking a pair changes in the form, in words, and the sampling it moves to: a pair's own
sampling (`models.pair.Preset.sampling`) replaces only a pair's own, never what a visitor set, and
the page says where it comes from (issue 53)."""

from __future__ import annotations

import gradio as gr

from ...core.settings import DRAFTERS
from ...models.pair import PRESETS, pair_sampling
from ..server.api import CHAT_PROMPT


def changes_line(preset, drafter, new_drafter, prompt, new_prompt) -> str:
    """What picking a pair changed in the form besides sampling, and why, in words ('' for nothing)."""
    said = []
    if new_drafter != drafter:
        why = "this pair has no draft model" if preset.draft is None else "the pair has it"
        said.append(f"Drafter: {DRAFTERS.get(drafter, drafter)} → {DRAFTERS[new_drafter]} ({why}). ")
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


def described(values) -> str:
    t, k, p = values
    return f"T = {t:g}, top-k {k}, top-p {p:g}"


def sampling_line(preset_key) -> str:
    """The short line beside the sampling controls: where a pair's sampling comes from."""
    preset = PRESETS.get(preset_key)
    if preset is None or not preset.sampling_from:
        return ("Sampling: T = 1, top-k 0, top-p 1, the full distribution, where the residual shows best; "
                "change freely.")
    return f"Sampling: {preset.sampling_from} — change freely; T = 1, top-k 0, top-p 1 shows the residual best."
