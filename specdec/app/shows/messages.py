"""What a visitor is told: every message the app shows for a refused input or a failed run is
made here, as a sentence, and raised as a quiet `gr.Error` (no traceback in the server's log)."""

from __future__ import annotations

import gradio as gr
import torch

from ...models import pair as models
from ...models.errors import HubUnreachable
from ...models.pair import ModelLoadError, scrub_paths


def sentence(text: str, capital: bool = True) -> str:
    """A message as a sentence: a capital first letter (unless it starts with a control's label,
    which keeps its case) and a full stop."""
    text = str(text)
    if capital:
        text = text[:1].upper() + text[1:]
    return text + ("" if text.endswith((".", ")", "!", "?")) else ".")


def error(text: str, capital: bool = True) -> gr.Error:
    """The error to raise for `text` (shown on the page, and by the API as AppError)."""
    return gr.Error(sentence(text, capital), print_exception=False)


def user_message(err: BaseException) -> str:
    """What to tell a visitor about an error from a run. Out of memory frees what it can first;
    the server stays up for the next request either way; server paths are never shown."""
    if isinstance(err, (MemoryError, torch.OutOfMemoryError)):
        models.release_memory()
        return ("The server ran out of memory for this run and stopped it. Try fewer new tokens, a smaller γ, "
                "or the bundled pair; the server is ready for the next run.")
    if isinstance(err, HubUnreachable):
        return hub_out_of_reach(err.label)
    if isinstance(err, (ValueError, ModelLoadError)):
        text = str(err)
        return text[:1].upper() + text[1:] if text else type(err).__name__
    detail = scrub_paths(str(err))[:300]
    return f"The run failed ({type(err).__name__}: {detail}); the server is ready for the next run."


def hub_out_of_reach(label: str) -> str:
    """A hub pair this server cannot load, in the page's words (its Model pair box, no presets, no
    folders), said when the pair is picked and again if Run is pressed."""
    return (f"{label} needs the Hugging Face Hub, which this server cannot reach. Pick the bundled pair "
            "under Model pair: it is always here.")
