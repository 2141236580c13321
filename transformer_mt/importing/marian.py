"""OPUS-MT and other `MarianMTModel` directories: weights, tokenizers and special ids.

A Marian directory holds `config.json` and the weights (read through transformers, extra `hf`),
`source.spm` / `target.spm` (the SentencePiece models that segment each side), `vocab.json`
(piece -> id, shared by both sides) or, with `separate_vocabs` in `tokenizer_config.json`,
`vocab.json` for the source and `target_vocab.json` for the target.

Its conventions, which the checkpoint records (`SpecialTokens`): sentences end with `</s>`
(`eos_token_id`, usually 0); the decoder starts from the pad id (`decoder_start_token_id`);
pad is never generated (`bad_words_ids` of its generation config); a multilingual model's
target language is a `>>xxx<<` piece written in front of the source text, each such piece a
language tag. transformers' `MarianTokenizer` also normalises punctuation with sacremoses when
that package is installed; we do not (neither does it without sacremoses).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_mt.data.specials import SpecialTokens
from transformer_mt.data.tokenizer import PieceTable, Tokenizer, TokenizerError
from transformer_mt.errors import TmtError, one_line
from transformer_mt.inference.hf_marian import (
    ConvertedModel,
    check_marian_config,
    from_marian_weights,
)

LANGUAGE_TAG = re.compile(r">>(.+)<<")


@dataclass
class ImportedModel:
    """A public model as our checkpoint needs it."""

    converted: ConvertedModel
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    specials: SpecialTokens
    src_lang: str
    tgt_lang: str


def read_marian(directory: Path, hf_config: Any) -> ImportedModel:
    """The Marian model in `directory` (its `hf_config` already read).

    Raises:
        TmtError: a missing or unreadable tokenizer file, an unsupported option (by its
            config key), or a vocabulary that does not fit the weights.
    """
    from transformers import MarianMTModel

    check_marian_config(hf_config)  # before reading megabytes of weights
    for name in ("source.spm", "target.spm"):
        if not (directory / name).is_file():
            raise TmtError(f"{directory / name}: missing; the model's tokenizer needs it")
    settings = _json(directory / "tokenizer_config.json", required=False)
    src_vocab = _json(directory / "vocab.json")
    tgt_vocab = src_vocab
    if settings.get("separate_vocabs"):
        tgt_vocab = _json(directory / "target_vocab.json")
        for piece in ("</s>", "<unk>", "<pad>"):
            if src_vocab.get(piece) != tgt_vocab.get(piece):
                raise TmtError(
                    f"{directory}/target_vocab.json: {piece} is {tgt_vocab.get(piece)}, "
                    f"{src_vocab.get(piece)} in vocab.json; we need one id on both sides"
                )
    hf_model = MarianMTModel.from_pretrained(directory, config=hf_config)
    converted = from_marian_weights(hf_config, hf_model.state_dict())
    src_tok = piece_tokenizer(directory / "source.spm", src_vocab, converted.src_vocab_size)
    tgt_tok = piece_tokenizer(directory / "target.spm", tgt_vocab, converted.tgt_vocab_size)
    return ImportedModel(
        converted,
        src_tok,
        tgt_tok,
        _specials(directory, hf_config, src_vocab),
        src_lang=str(settings.get("source_lang") or "src"),
        tgt_lang=str(settings.get("target_lang") or "tgt"),
    )


def _specials(directory: Path, hf_config: Any, vocab: dict[str, int]) -> SpecialTokens:
    pad = hf_config.pad_token_id
    start = hf_config.decoder_start_token_id
    never = banned_ids(directory, pad)
    tags = {m.group(1): i for piece, i in vocab.items() if (m := LANGUAGE_TAG.fullmatch(piece))}
    return SpecialTokens(
        pad=pad,
        unk=vocab["<unk>"],
        bos=pad if start is None else start,
        eos=hf_config.eos_token_id,
        never=never,
        language_tags=tags,
        source_tag="target" if tags else "",
    )


def banned_ids(directory: Path, pad: int) -> tuple[int, ...]:
    """The single tokens the model's generation config bans (`bad_words_ids`), and pad: a
    padding token is never part of a translation."""
    generation = _json(directory / "generation_config.json", required=False)
    banned = [ids[0] for ids in generation.get("bad_words_ids") or [] if len(ids) == 1]
    return tuple(dict.fromkeys([pad, *banned]))


def piece_tokenizer(
    spm_path: Path, vocab: dict[str, int], rows: int, skip: frozenset[str] | None = None
) -> Tokenizer:
    """`spm_path`'s segmentation numbered by `vocab`, for a model with `rows` embedding rows;
    decoding leaves out `skip` (None: the `<...>` specials and `>>xxx<<` tags).

    Raises:
        TmtError: the file is missing or not SentencePiece, or an id of `vocab` has no row.
    """
    if not spm_path.is_file():
        raise TmtError(f"{spm_path}: missing; the model's tokenizer needs it")
    if max(vocab.values(), default=-1) >= rows:
        raise TmtError(
            f"{spm_path.parent}: the vocabulary numbers pieces up to {max(vocab.values())}, "
            f"the model's embeddings have {rows} rows"
        )
    if skip is None:
        skip = frozenset(p for p in vocab if _special(p) or LANGUAGE_TAG.fullmatch(p))
    try:
        return Tokenizer(spm_path.read_bytes(), str(spm_path), PieceTable(vocab, rows, skip))
    except TokenizerError as err:
        raise TmtError(str(err)) from None


def _special(piece: str) -> bool:
    return piece.startswith("<") and piece.endswith(">")


def _json(path: Path, required: bool = True) -> dict[str, Any]:
    """The JSON object in `path`; {} for a missing optional file."""
    if not path.is_file():
        if required:
            raise TmtError(f"{path}: missing; the model's tokenizer needs it")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise TmtError(f"{path}: not readable JSON ({one_line(err)})") from None
    if not isinstance(data, dict):
        raise TmtError(f"{path}: expected a JSON object")
    return data
