"""Token labels a reader can read: a token that is only part of a multi-byte character shows its
bytes (it decoded to "�", and the p/q chart told several apart only as "� #15107"); a token of one
thin mark (".", ",") is named beside it on the charts, where a tick label drew it as a speck."""

from __future__ import annotations

from specdec import RunSettings, speculative_generate
from specdec.app.shows import charts
from specdec.models.token_bytes import REPLACEMENT, byte_level_alphabet, legible_token_text, token_bytes


def partial_character_ids(tokenizer) -> list[int]:
    return [i for i in range(len(tokenizer)) if REPLACEMENT in tokenizer.decode([i])]


def test_a_token_that_is_part_of_a_character_reads_as_its_bytes(bundled):
    """The bundled pair's byte-level tokenizer has tokens of one byte of a longer character: each
    reads as its byte ("\\xa1"), all differ, and the chart's labels need no id to tell them apart."""
    partial = partial_character_ids(bundled.tokenizer)
    assert partial, "the control: such tokens exist, and plain decoding makes them '�'"
    texts = bundled.token_texts(partial)
    assert all(REPLACEMENT not in texts[i] and texts[i].startswith("\\x") for i in partial)
    assert len(set(texts.values())) == len(partial)
    gen = speculative_generate(bundled, "To be", RunSettings(gamma=2, max_new_tokens=2, seed=0))
    gen.token_text.update(texts)
    assert not [label for label in charts.unique_labels(gen, partial) if "#" in label]


def test_whole_characters_in_a_token_stay_text():
    """Bytes that make whole characters are kept as text; only the incomplete ones are escaped."""
    alphabet = {b: ch for ch, b in byte_level_alphabet().items()}
    piece = "".join(alphabet[b] for b in " 世".encode() + b"\xe4")
    assert token_bytes(piece).decode("utf-8", errors="backslashreplace") == " 世\\xe4"
    assert token_bytes("<0xE2>") == b"\xe2"

    class Plain:   # a tokenizer whose tokens decode whole: left as they are
        def decode(self, ids):
            return "cat"
    assert legible_token_text(Plain(), 5) == "cat"


def test_a_thin_mark_is_named_on_the_charts(bundled):
    gen = speculative_generate(bundled, "To be", RunSettings(gamma=2, max_new_tokens=2, seed=0))
    ids = {mark: bundled.tokenizer.convert_tokens_to_ids(mark) for mark in (".", ",")}
    gen.token_text.update(bundled.token_texts(ids.values()))
    assert charts.show_token(gen, ids["."]) == ". period" and charts.show_token(gen, ids[","]) == ", comma"
