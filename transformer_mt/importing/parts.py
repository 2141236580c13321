"""What the readers of public models share: the imported model as a checkpoint needs it, a
SentencePiece model numbered by the model's own table, the ids a model never generates, and
its JSON files read with errors named."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_mt.data.specials import SpecialTokens, tag_code
from transformer_mt.data.tokenizer import PieceTable, Tokenizer, TokenizerError
from transformer_mt.errors import TmtError, one_line
from transformer_mt.inference.hf_marian import ConvertedModel


@dataclass
class ImportedModel:
    """A public model as our checkpoint needs it."""

    converted: ConvertedModel
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    specials: SpecialTokens
    src_lang: str
    tgt_lang: str


def banned_ids(directory: Path, pad: int) -> tuple[int, ...]:
    """The single tokens the model's generation config bans (`bad_words_ids`), and pad: a
    padding token is never part of a translation."""
    generation = read_json(directory / "generation_config.json", required=False)
    banned = [ids[0] for ids in generation.get("bad_words_ids") or [] if len(ids) == 1]
    return tuple(dict.fromkeys([pad, *banned]))


def piece_tokenizer(
    spm_path: Path,
    vocab: dict[str, int],
    rows: int,
    skip: frozenset[str] | None = None,
    inline_tags: bool = False,
) -> Tokenizer:
    """`spm_path`'s segmentation numbered by `vocab`, for a model with `rows` embedding rows;
    decoding leaves out `skip` (None: the `<...>` specials and `>>xxx<<` tags); with
    `inline_tags`, a leading `>>xxx<<` of a text is one piece (`PieceTable.inline_tags`).

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
        skip = frozenset(p for p in vocab if _special(p) or tag_code(p) is not None)
    try:
        table = PieceTable(vocab, rows, skip, inline_tags)
        return Tokenizer(spm_path.read_bytes(), str(spm_path), table)
    except TokenizerError as err:
        raise TmtError(str(err)) from None


def _special(piece: str) -> bool:
    return piece.startswith("<") and piece.endswith(">")


def read_json(path: Path, required: bool = True) -> dict[str, Any]:
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
