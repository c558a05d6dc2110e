"""A drafter is one class and one registration: a throw-away drafter defined here, registered for a
test and taken out after it, runs through the exact verify from the library, the CLI and the page's
request, and the page offers it, with no other file changed."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import pytest
import torch

from commands import in_process
from specdec import RunSettings, SamplingConfig, autoregressive_generate, load_trace, speculative_generate
from specdec.cli.main import main
from specdec.core.registry import DrafterKind, kind_of, labels, names, register, unregister
from specdec.core.sampling import Rule

GREEDY = SamplingConfig(temperature=0.0)
PROMPT = "ROMEO:\nBut, soft! what light through yonder window breaks? It is the east, and the"


class UnigramDrafter:
    """Proposes the context's most frequent token, γ times, with q one-hot on it (deterministic, so
    the verify's rule stays exact). It counts the prompt's tokens when the run starts, then only the
    tokens each round adds. It answers the `Drafter` protocol without deriving from anything."""

    kind = DrafterKind("unigram", "the context's most frequent token (a test's drafter)", preference=90)
    built: list[UnigramDrafter] = []   # every drafter built, so a test can see what it was told

    def __init__(self, vocab_size: int, device):
        self.vocab_size, self.device = vocab_size, device
        self.forwards = 0   # no model
        self.counts: Counter[int] = Counter()
        self.seen = 0
        self.started: list[tuple[list[int], RunSettings]] = []

    @property
    def name(self) -> str:
        return self.kind.name

    @classmethod
    def build(cls, pair) -> UnigramDrafter:
        drafter = cls(pair.vocab_size, pair.device)
        cls.built.append(drafter)
        return drafter

    def start(self, prompt: list[int], settings) -> None:
        self.started.append((list(prompt), settings))
        self.counts.update(prompt)
        self.seen = len(prompt)

    def propose(self, context, gamma, sampling, generator, stop=None):
        self.counts.update(context[self.seen:])
        self.seen = len(context)
        drafts = [self.counts.most_common(1)[0][0]] * max(gamma, 0)
        q = torch.zeros(len(drafts), self.vocab_size, device=self.device)
        q[:, drafts[:1]] = 1.0
        return drafts, q


@contextmanager
def registered(cls):
    register(cls)
    try:
        yield cls
    finally:
        unregister(cls.kind.name)
        cls.built.clear()


def test_a_registered_drafter_runs_exactly_from_the_library_and_is_gone_when_taken_out(bundled):
    with registered(UnigramDrafter):
        assert names()[-1] == "unigram" and kind_of("unigram") is UnigramDrafter.kind
        settings = RunSettings(gamma=3, max_new_tokens=24, sampling=GREEDY, drafter="unigram")
        gen = speculative_generate(bundled, PROMPT, settings)
        # Greedy: the exact verify keeps exactly the target's own tokens, whatever was drafted.
        assert gen.token_ids == autoregressive_generate(bundled, PROMPT, settings).token_ids
        assert 0 < gen.stats.tested <= gen.stats.drafted and gen.settings.rule is Rule.EXACT   # drafts were verified
        (drafter,) = UnigramDrafter.built   # one drafter for the run, started once on its prompt
        assert drafter.started == [(gen.prompt_ids, gen.settings)]
        sampled = speculative_generate(bundled, PROMPT, settings.with_(sampling=SamplingConfig(), seed=3))
        assert sampled.stats.accepted <= sampled.stats.tested and 0 < sampled.stats.tested <= sampled.stats.drafted
    assert "unigram" not in names()
    with pytest.raises(ValueError, match="unknown drafter 'unigram'"):
        RunSettings(drafter="unigram").validate()


def test_a_registered_drafter_is_a_choice_of_the_cli(bundled, capsys, tmp_path):
    trace = tmp_path / "unigram.json"
    with registered(UnigramDrafter):
        done = in_process(capsys, "generate", "--drafter", "unigram", "--prompt", PROMPT, "--temperature", "0",
                          "--gamma", "3", "--max-new-tokens", "16", "--device", "cpu", "--color", "never",
                          "--json", trace)
        assert done.returncode == 0, done.stderr
        assert "drafter=unigram" in done.stdout
        gen = load_trace(trace.read_text(encoding="utf-8"))
        alone = autoregressive_generate(bundled, PROMPT, RunSettings(max_new_tokens=16, sampling=GREEDY))
        assert gen.settings.drafter == "unigram" and gen.token_ids == alone.token_ids
        with pytest.raises(SystemExit):
            main(["generate", "--help"])
        assert f"unigram: {labels()['unigram']}" in " ".join(capsys.readouterr().out.split())   # argparse wraps
    refused = in_process(capsys, "generate", "--drafter", "unigram", "--prompt", PROMPT)
    assert refused.returncode != 0 and "invalid choice" in refused.stderr


def test_a_registered_drafter_is_offered_by_the_page_and_accepted_by_its_requests():
    from specdec.app.page.handlers import drafter_update, offered_drafters
    from specdec.app.server.api import RunRequest
    from specdec.models.pair import BUNDLED

    with registered(UnigramDrafter):
        offered = offered_drafters(BUNDLED)
        assert "unigram" in offered
        assert (labels()["unigram"], "unigram") in drafter_update(offered, "unigram")["choices"]
        _, _, settings = RunRequest(prompt=PROMPT, drafter="unigram").checked()
        assert settings.drafter == "unigram"
    assert "unigram" not in offered_drafters(BUNDLED)


def test_a_name_taken_by_another_drafter_is_refused_and_the_registry_stays_as_it_was():
    class Impostor(UnigramDrafter):
        kind = DrafterKind("ngram", "not the n-gram drafter")

    before = labels()
    with pytest.raises(ValueError, match="a drafter named 'ngram' is registered already"):
        register(Impostor)
    assert labels() == before and kind_of("ngram").label != "not the n-gram drafter"
