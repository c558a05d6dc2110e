"""A token's own text, legible where it is only part of a character.

A byte-level tokenizer (GPT-2's, SmolLM2's, the bundled pair's) splits a character of several UTF-8
bytes (an emoji, a Chinese character) over tokens; decoded alone, such a token is U+FFFD ("�"), and
every such token looks the same. Here its bytes are read from the tokenizer's own token string and
written as Python writes bytes that are no text: "\\xf0\\x9f" (the whole characters in it kept).
"""

from __future__ import annotations

import re
from functools import lru_cache

REPLACEMENT = "\ufffd"   # what decoding gives for bytes that are not a whole character
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")   # a SentencePiece byte-fallback token, "<0xE2>"


@lru_cache(maxsize=1)
def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet inverted: the printable character that stands for each byte in a
    byte-level tokenizer's token strings ("Ġ" for a space) -> the byte."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(kept), 0
    for b in range(256):
        if b not in kept:
            kept.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(kept, chars)}


def token_bytes(piece: str) -> bytes | None:
    """The bytes a token string stands for (a byte-level one, or a byte-fallback "<0xE2>"); None
    when it is neither."""
    whole = _BYTE_TOKEN.fullmatch(piece)
    if whole:
        return bytes([int(whole.group(1), 16)])
    alphabet = byte_level_alphabet()
    if piece and all(ch in alphabet for ch in piece):
        return bytes(alphabet[ch] for ch in piece)
    return None


def legible_token_text(tokenizer, token_id: int) -> str:
    """`tokenizer.decode([token_id])`, except where that gives "�" for bytes that are no whole
    character: then the token's own bytes, undecodable ones written "\\xNN"."""
    text = tokenizer.decode([token_id])
    if REPLACEMENT not in text:
        return text
    raw = token_bytes(tokenizer.convert_ids_to_tokens(token_id) or "")
    return text if raw is None else raw.decode("utf-8", errors="backslashreplace")
