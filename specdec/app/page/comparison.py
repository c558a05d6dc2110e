"""The Decode tab's comparison with the target alone, as the page shows it while it runs: about how
long it will take, said before it starts, then each repeat as it ends, in the status line the
streamed run used (`runs.timed_comparison` times it; `views.comparison_status` words it)."""

from __future__ import annotations

from ...models.pair import ModelLoadError
from ..server import runs
from ..shows import charts, views
from ..shows.messages import error, user_message


def timed_against_target(gen, prompt: str, preset: str, settings, stop):
    """Yield the page's updates while the run `gen` is timed again beside the target alone; return
    the `measure.Repeats`. An estimate first, from the target step measured on this machine (or a
    verify of this run where none is), so a visitor knows whether to wait or to stop it."""
    try:
        step_ms = runs.target_step_here(preset, settings.drafter)
        yield dict(status=views.comparison_status(gen, step_ms, runs.COMPARE_REPEATS),
                   metrics=charts.metrics_markdown(gen, running=True))
        for message in runs.timed_comparison(prompt, preset, settings, stop):
            if not isinstance(message, runs.Repeated):
                return message
            yield dict(status=views.comparison_status(gen, step_ms, runs.COMPARE_REPEATS, message.done))
    except (ValueError, ModelLoadError) as err:   # a load or input failure, told to the visitor
        raise error(user_message(err)) from None
    raise AssertionError("the comparison ended without a result")   # pragma: no cover
