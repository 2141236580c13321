"""OPUS-MT and other `MarianMTModel` directories: weights, tokenizers and special ids.

A Marian directory holds `config.json` and the weights (read through transformers, extra `hf`),
`source.spm` / `target.spm` (the SentencePiece models that segment each side), `vocab.json`
(piece -> id, shared by both sides) or, with `separate_vocabs` in `tokenizer_config.json`,
`vocab.json` for the source and `target_vocab.json` for the target.

Its conventions, which the checkpoint records (`SpecialTokens`): sentences end with `</s>`
(`eos_token_id`, usually 0); the decoder starts from the pad id (`decoder_start_token_id`);
pad is never generated (`bad_words_ids` of its generation settings); a multilingual model's
target language is a `>>xxx<<` piece written in front of the source text, each such piece a
language tag. transformers' `MarianTokenizer` also normalises punctuation with sacremoses when
that package is installed; we do not (neither does it without sacremoses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformer_mt.data.specials import SpecialTokens, tag_code
from transformer_mt.errors import TmtError
from transformer_mt.interop.hf_marian import check_marian_config, from_marian_weights
from transformer_mt.interop.import_files import check_file, read_json
from transformer_mt.interop.import_generation import read_generation
from transformer_mt.interop.import_parts import ImportedModel, piece_tokenizer
from transformer_mt.interop.import_values import (
    TOKENIZER_KEYS,
    check_ids_in_rows,
    check_special_pieces,
    check_values,
    check_vocab,
)
from transformer_mt.interop.import_weights import read_weights

# MarianTokenizer's special pieces, and the config key that holds each one's id (None: none).
_SPECIAL_PIECES = (("</s>", "eos_token_id"), ("<pad>", "pad_token_id"), ("<unk>", None))


def read_marian(directory: Path, hf_config: Any) -> ImportedModel:
    """The Marian model in `directory` (its `hf_config` already read and checked).

    Raises:
        TmtError: a missing or unreadable tokenizer file, an unsupported option (by its
            config key), a vocabulary or special id that does not fit the model, or weights
            that are damaged or do not fit the config.
    """
    from transformers import MarianMTModel

    check_marian_config(hf_config)  # before reading megabytes of weights
    for name in ("source.spm", "target.spm"):
        check_file(directory / name)
    settings = read_json(directory / "tokenizer_config.json", required=False)
    check_values(settings, TOKENIZER_KEYS, directory / "tokenizer_config.json")
    src_vocab, tgt_vocab = _vocabularies(
        directory, hf_config, bool(settings.get("separate_vocabs"))
    )
    generation = read_generation(directory, hf_config.pad_token_id, hf_config.decoder_vocab_size)
    state = read_weights(MarianMTModel, directory, hf_config)
    converted = from_marian_weights(hf_config, state)
    src_tok = piece_tokenizer(
        directory / "source.spm", src_vocab, converted.src_vocab_size, inline_tags=True
    )
    tgt_tok = piece_tokenizer(
        directory / "target.spm", tgt_vocab, converted.tgt_vocab_size, inline_tags=True
    )
    return ImportedModel(
        converted,
        src_tok,
        tgt_tok,
        _specials(hf_config, src_vocab, generation.never),
        src_lang=settings.get("source_lang") or "src",
        tgt_lang=settings.get("target_lang") or "tgt",
        generation=generation,
    )


def _vocabularies(
    directory: Path, hf_config: Any, separate: bool
) -> tuple[dict[str, int], dict[str, int]]:
    """vocab.json (both sides, or the source's) and target_vocab.json (with `separate`), each
    checked against the rows of the side it numbers, with the special pieces at the config's
    ids on both sides; and the config's ids within both tables."""
    config = directory / "config.json"
    src_rows, tgt_rows = hf_config.vocab_size, hf_config.decoder_vocab_size
    both = min(src_rows, tgt_rows)
    size_key = "vocab_size" if both == src_rows else "decoder_vocab_size"
    ids = [("pad_token_id", hf_config.pad_token_id), ("eos_token_id", hf_config.eos_token_id)]
    check_ids_in_rows(ids, both, size_key, config)
    start = [("decoder_start_token_id", hf_config.decoder_start_token_id)]
    check_ids_in_rows(start, tgt_rows, "decoder_vocab_size", config)
    if separate:
        sides = [("vocab.json", src_rows), ("target_vocab.json", tgt_rows)]
    else:
        sides = [("vocab.json", both)]
    vocabs = []
    for name, rows in sides:
        vocab = check_vocab(read_json(directory / name), rows, directory / name)
        expected = [(p, key, key and getattr(hf_config, key)) for p, key in _SPECIAL_PIECES]
        check_special_pieces(expected, vocab, directory / name, config)
        vocabs.append(vocab)
    if separate and vocabs[0]["<unk>"] != vocabs[1]["<unk>"]:
        raise TmtError(
            f"{directory / 'target_vocab.json'}: <unk> is {vocabs[1]['<unk>']}, "
            f"{vocabs[0]['<unk>']} in vocab.json; we need one id on both sides"
        )
    return vocabs[0], vocabs[-1]


def _specials(hf_config: Any, vocab: dict[str, int], never: tuple[int, ...]) -> SpecialTokens:
    pad = hf_config.pad_token_id
    start = hf_config.decoder_start_token_id
    tags = {code: i for piece, i in vocab.items() if (code := tag_code(piece)) is not None}
    return SpecialTokens(
        pad=pad,
        unk=vocab["<unk>"],
        bos=pad if start is None else start,
        eos=hf_config.eos_token_id,
        never=never,
        language_tags=tags,
        source_tag="target" if tags else "",
    )
