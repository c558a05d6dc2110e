"""The step viewer's jump to the next position whose token lay outside the drafter's vocabulary,
beside "next rejection" (`handlers.next_rejection`): the same walk over the rounds, to the places
`outside.outside_places` finds."""

from __future__ import annotations

from ...trace.spine import Generation
from ..shows import views
from ..shows.outside import outside_places


def next_outside(gen: Generation | None, round_number) -> dict:
    """The next round (after the one in view, from the first again after the last) whose rejected
    draft's place went to a token outside the drafter's vocabulary, at that position; the round in
    view when no other has one."""
    if gen is None or not gen.rounds:
        return views.show_step(None, 1, None)
    here = views.clamp_round(gen, round_number)
    places = dict(outside_places(gen))
    order = [*range(here + 1, len(gen.rounds)), *range(here + 1)]
    found = next((r for r in order if r in places), None)
    if found is None:
        return views.show_step(gen, here + 1, None)
    return views.show_step(gen, found + 1, places[found])
