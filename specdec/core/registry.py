"""The drafters a run can name: one registry, name -> what the drafter is and the class that drafts.

A drafter is one class (`specdec.drafting.drafters`) carrying a `DrafterKind`: everything the rest
of the code asks about it (its words, what it needs from a pair, how the engine and the γ pick
treat it). Code elsewhere reads those answers from here and never compares a drafter's name.

The registry sits on the lowest level because the settings, the trace's reader and the pair's
loader (below the drafting package) must know which names exist and what each needs, without
importing torch. So the three built-in kinds are declared here, and their classes attach
themselves when `specdec.drafting` is imported. A new drafter registers its class, and with it its
kind, with `register`; `unregister` takes it out again (a test's throw-away drafter cleans up).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DrafterKind:
    name: str                        # what a run names (settings, the API, `--drafter`, a trace)
    label: str                       # what the page's choices and the CLI's help call it
    short: str = ""                  # a word for a table cell (the page's examples); the name if unset
    as_default: str = ""             # how the CLI's help names it among the defaults; the short word if unset
    needs_draft_model: bool = False  # it runs the pair's draft model
    reads_features: bool = False     # it reads the target's features, through weights trained for that target
    proposes_special: bool = True    # it may propose the tokenizer's special tokens (a chat template's markers)
    gamma_from_card: bool = False    # its first γ comes from its card's α and a measured cost profile
    on_engine: bool = False          # the static-cache engine (CUDA graphs on a GPU) can run its rounds
    preference: int = 50             # lower: preferred where a run names no drafter and several can run

    @property
    def word(self) -> str:
        return self.short or self.name

    def runs_on(self, has_draft: bool, has_features: bool) -> bool:
        """Whether a pair with (or without) a draft model and features weights can run it."""
        return (has_draft or not self.needs_draft_model) and (has_features or not self.reads_features)


MODEL = DrafterKind("model", "small draft model", "draft model", "the draft model where the pair has one",
                    needs_draft_model=True, on_engine=True, preference=0)
NGRAM = DrafterKind("ngram", "n-gram prompt lookup (no model)", "n-gram", "n-gram",
                    proposes_special=False, preference=2)
FEATURES = DrafterKind("features", "the target's own features (one layer, EAGLE-style)", "features",
                       "its features drafter", reads_features=True, gamma_from_card=True, on_engine=True,
                       preference=1)

_KINDS: dict[str, DrafterKind] = {kind.name: kind for kind in (MODEL, NGRAM, FEATURES)}   # listing order
_CLASSES: dict[str, type] = {}


def register(cls: type) -> type:
    """Add a drafter class (its `kind` says its name and what it needs); returns the class, so it
    can decorate it. A name taken by another kind or another class is refused (the same class
    again, its module reloaded, replaces itself)."""
    kind, old = cls.kind, _CLASSES.get(cls.kind.name, cls)
    if _KINDS.get(kind.name, kind) != kind or (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"a drafter named {kind.name!r} is registered already")
    _KINDS[kind.name] = kind
    _CLASSES[kind.name] = cls
    return cls


def unregister(name: str) -> None:
    """Take a drafter out of the registry (its kind and its class)."""
    _KINDS.pop(name, None)
    _CLASSES.pop(name, None)


def kinds() -> list[DrafterKind]:
    """Every registered kind, in the order the page and the CLI list them."""
    return list(_KINDS.values())


def names() -> list[str]:
    return list(_KINDS)


def labels() -> dict[str, str]:
    """name -> label, in listing order (the page's choices, the CLI's help)."""
    return {kind.name: kind.label for kind in _KINDS.values()}


def find(name: str) -> DrafterKind | None:
    """The kind named `name`, or None (a name read from elsewhere: a stored profile, a card)."""
    return _KINDS.get(name) if isinstance(name, str) else None


def unknown_drafter(name) -> str:
    return f"unknown drafter {name!r}: choose one of {', '.join(map(repr, _KINDS))}"


def kind_of(name: str) -> DrafterKind:
    """The kind named `name`; ValueError naming the choices for a name nobody registered."""
    kind = find(name)
    if kind is None:
        raise ValueError(unknown_drafter(name))
    return kind


def class_of(name: str) -> type:
    """The class that drafts for `name` (attached when `specdec.drafting` is imported)."""
    kind_of(name)
    if name not in _CLASSES:
        raise ValueError(f"the drafter {name!r} has no class: import specdec.drafting first")
    return _CLASSES[name]


def by_preference(choices: list[str]) -> list[str]:
    """`choices` (registered names), the preferred first: the order a default is picked in."""
    return sorted(choices, key=lambda name: kind_of(name).preference)


def runnable(has_draft: bool, has_features: bool) -> list[str]:
    """The names a pair with (or without) a draft model and features weights can run, in listing order."""
    return [kind.name for kind in _KINDS.values() if kind.runs_on(has_draft, has_features)]


def fallback() -> str:
    """The preferred drafter that runs on any pair (needs neither a draft model nor features weights)."""
    return by_preference(runnable(False, False))[0]


def lacks_draft_model(name: str, label: str, choices: list[str]) -> str:
    """What a run that asks for a drafter that needs a draft model hears from a pair with none."""
    return (f"the {name!r} drafter is a drafter this pair lacks: {label} has no draft model. Choose the "
            f"{' or '.join(map(repr, by_preference(choices)))} drafter")


def defaults_sentence() -> str:
    """Which drafter a run that names none gets, in words (the CLI's help)."""
    return ", else ".join(kind_of(name).as_default or kind_of(name).word for name in by_preference(names()))
