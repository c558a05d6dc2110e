"""A pair carries the sampling its runs start with: SmolLM2-135M-Instruct its authors'
(T = 0.2, top-p 0.9, and transformers' default top-k 50, as its model card's `generate` call runs),
the bundled pair the app's T = 1, top-k 0, top-p 1. The page, the CLI and the API start a run of a
pair with its own values when none is given, say where they come from, and keep any value given."""

from __future__ import annotations

from specdec.app.page import handlers
from specdec.app.server import api
from specdec.cli.main import build_parser, settings_of
from specdec.core.sampling import SamplingConfig
from specdec.models.pair import PRESETS, pair_sampling, sampling_for

REAL = "smollm2-135m"
CARD = SamplingConfig(temperature=0.2, top_k=50, top_p=0.9)
APP = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0)


def test_each_pair_carries_its_own_sampling():
    assert pair_sampling(REAL) == CARD and pair_sampling("bundled") == APP
    assert "model card" in PRESETS[REAL].sampling_from and PRESETS["bundled"].sampling_from == ""


def test_an_api_request_without_sampling_runs_at_its_pairs_own_and_keeps_what_is_given():
    assert api.RunRequest(prompt="Hi", preset=REAL).checked()[2].sampling == CARD
    assert api.RunRequest().checked()[2].sampling == APP
    full = api.RunRequest(prompt="Hi", preset=REAL, temperature=1.0, top_k=0, top_p=1.0).checked()[2].sampling
    assert full == APP                                     # T = 1, top-k 0 stays a value away
    cooler = api.RunRequest(prompt="Hi", preset=REAL, temperature=0.7).checked()[2].sampling
    assert cooler == SamplingConfig(0.7, 50, 0.9)
    values = dict(zip(api.RunRequest.names(), api.RunRequest(prompt="Hi", preset=REAL).values(), strict=True))
    assert (values["temperature"], values["top_k"], values["top_p"]) == (0.2, 50, 0.9)   # what gradio_client sends


def test_a_link_without_sampling_runs_at_its_pairs_own():
    fields, _ = api.parse_link({"prompt": "Hi", "pair": REAL})
    assert api.RunRequest().with_(**fields).checked()[2].sampling == CARD
    query = api.link_query(api.RunRequest(prompt="Hi", preset=REAL).resolved())
    assert "t=0.2" in query and "top_k=50" in query and "top_p=0.9" in query


def test_the_real_models_examples_run_at_its_authors_sampling():
    real = [e for e in api.EXAMPLES if e.preset == REAL]
    assert real and all((e.temperature, e.top_k, e.top_p) == (0.2, 50, 0.9) for e in real)
    assert all(e.temperature is not None for e in api.EXAMPLES)   # the form gets a number for every field


def test_the_cli_runs_a_preset_at_its_own_sampling_and_says_where_it_comes_from():
    args = build_parser().parse_args(["generate", "--preset", REAL, "--prompt", "Hi", "--drafter", "ngram"])
    assert settings_of(args).sampling == CARD
    args = build_parser().parse_args(["generate", "--preset", REAL, "--prompt", "Hi", "--drafter", "ngram",
                                      "--temperature", "1", "--top-k", "0", "--top-p", "1"])
    assert settings_of(args).sampling == APP
    args = build_parser().parse_args(["generate", "--prompt", "Hi"])
    assert settings_of(args).sampling == APP
    # Where it comes from: said only where the preset's own filled something in.
    assert "T = 0.2, top-p 0.9" in sampling_for(REAL, None, None, None)[1]
    assert sampling_for(REAL, 1.0, 0, 1.0)[1] == "" and sampling_for("bundled", None, None, None)[1] == ""
    assert sampling_for(None, None, None, None)[0] == APP   # a --target pair: the app's own


def test_picking_a_pair_moves_sampling_left_at_a_pairs_own_and_keeps_a_visitors():
    values, said = handlers.follow_sampling(REAL, 1.0, 0, 1.0)          # the bundled pair's own
    assert values == (0.2, 50, 0.9) and "T = 1, top-k 0, top-p 1 → T = 0.2, top-k 50, top-p 0.9" in said
    values, said = handlers.follow_sampling("bundled", 0.2, 50, 0.9)    # back: the app's own
    assert values == (1.0, 0, 1.0)
    values, said = handlers.follow_sampling(REAL, 0.5, 0, 1.0)          # set by the visitor: kept
    assert "kept as you set it" in said and "T = 0.5" in said
    assert handlers.follow_sampling(REAL, 0.2, 50, 0.9) == ((0.2, 50, 0.9), "")


def test_the_page_says_where_the_sampling_comes_from():
    line = handlers.sampling_line(REAL)
    assert "authors' recommended T = 0.2, top-p 0.9 for SmolLM2-135M-Instruct" in line
    assert "change freely" in line and "T = 1, top-k 0" in line and "residual" in line
    assert "T = 1, top-k 0, top-p 1" in handlers.sampling_line("bundled")


def test_each_example_is_labelled_whole_with_its_sampling():
    # A table of the examples' seven fields ran past the page at 800 px; Gradio cuts a label past
    # about 60 characters, so each label fits, and the real model's says its authors' sampling.
    from specdec.app.page.layout import LABEL_CHARS, example_label

    labels = [example_label(e) for e in api.EXAMPLES]
    assert all(len(label) <= LABEL_CHARS for label in labels), labels
    real = [label for e, label in zip(api.EXAMPLES, labels, strict=True) if e.preset == REAL]
    assert real and all(label.endswith("T 0.2 top-p 0.9") and "SmolLM2" in label for label in real), real
    assert len(set(labels)) == len(labels)


def test_the_gamma_sentence_stays_beside_the_controls():
    """The γ a pair's measured costs pick was said once, in the status line when the pair was picked,
    and the first run wrote over it: the line beside the sampling controls keeps it (the real pair on
    this kind of device, where a profile and its drafter's card were measured); the bundled pair,
    with nothing measured for a pick, says none."""
    from specdec.app.page.pair_words import own_dtype
    from specdec.explain.gamma import gamma_for
    from specdec.models.pair import PRESETS, pick_device

    device = pick_device()[0]   # the pair's own precision there: the costs the line reads
    pick = gamma_for(REAL, "features", PRESETS[REAL].sampling.temperature, device, own_dtype(REAL, device))
    assert pick is not None and pick.sentence() in handlers.sampling_line(REAL)
    assert "picked for this pair" not in handlers.sampling_line("bundled")


def test_the_gamma_sentence_follows_the_drafter():
    """The pick is its drafter's: the real pair's n-gram drafter has no card of its α, so the line beside
    the controls says that no γ is picked for it and no speed predicted, and quotes no other drafter's
    pick (it did: an n-gram example showed the features drafter's "γ 2 picked for this pair and
    drafter" beside γ 4)."""
    features, ngram = handlers.sampling_line(REAL, "features"), handlers.sampling_line(REAL, "ngram")
    assert "picked for this pair and drafter" in features and features == handlers.sampling_line(REAL)
    assert "picked" not in ngram.replace("no γ is picked", "") and "α 0." not in ngram
    assert "The n-gram drafter has no card of its α here" in ngram and "compare with autoregressive" in ngram
    assert handlers.sampling_line("bundled", "ngram") == handlers.sampling_line("bundled")   # nothing measured
