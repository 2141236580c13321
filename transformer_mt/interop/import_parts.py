"""What the readers of public models share: the imported model as a checkpoint needs it, and a
SentencePiece model numbered by the model's own table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformer_mt.data.specials import SpecialTokens, tag_code
from transformer_mt.data.tokenizer import PieceTable, Tokenizer, TokenizerError
from transformer_mt.errors import TmtError
from transformer_mt.interop.hf_bart import ConvertedModel
from transformer_mt.interop.import_files import check_file
from transformer_mt.interop.import_generation import Generation


@dataclass
class ImportedModel:
    """A public model as our checkpoint needs it."""

    converted: ConvertedModel
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    specials: SpecialTokens
    src_lang: str
    tgt_lang: str
    generation: Generation  # the search settings of `generate`, as ours
    # Training-only settings of the config our model leaves out (`hf_bart.ignored_settings`).
    ignored: tuple[str, ...] = ()


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
    check_file(spm_path)
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
