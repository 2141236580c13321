"""Export a checkpoint for deployment: a Hugging Face directory or a CTranslate2 model.

The Hugging Face family follows from the model options: `pre_norm: true` with
`positions: sinusoidal_fairseq` (what `tmt import` writes for NLLB / M2M100, and what Marian
cannot hold) is exported as `M2M100ForConditionalGeneration`; anything else as
`MarianMTModel`, refused by name where Marian lacks an option.

- Marian: the weight mapping of `hf_marian.py` plus a `MarianTokenizer` built from our
  SentencePiece model(s), so `MarianMTModel.from_pretrained(OUT)` and
  `MarianTokenizer.from_pretrained(OUT)` work offline; vocab.json numbers the pieces as the
  model does (an imported model's table, else SentencePiece's ids).
- M2M100: the weight mapping of `hf_m2m100.py` plus an `NllbTokenizer` (what
  `AutoTokenizer.from_pretrained(OUT)` loads) made from the SentencePiece model
  (sentencepiece.bpe.model) the way transformers makes NLLB's: fairseq's <s> <pad> </s> <unk>
  at 0-3, the pieces past them, then the table's added tokens (language codes as extra special
  tokens, <mask>) in the model's id order. Its numbering is compared with the model's table
  (`PieceTable.ids`) and the export refused on the first difference, so only a tokenizer that
  numbers pieces as NLLB's does is written (not M2M100's own vocab.json order, nor SentencePiece's
  ids of a model trained here). The generation config has the decoder's first input
  (`decoder_start_token_id`, NLLB's </s>); the target language's code, which NLLB forces first,
  is per request: `generate(..., forced_bos_token_id=tokenizer.convert_tokens_to_ids(code))`.

Both carry the model's own special ids (`SpecialTokens`): pad, eos and the decoder's first
input in the config, the ids search never produces as the generation config's
`bad_words_ids`. The CTranslate2 export (`export_ct2.py`) builds the model with CTranslate2's
spec API directly from our weights: CTranslate2's Marian loader assumes OPUS-MT special
tokens, which ours are not.

Either export writes into a temporary folder beside OUT_DIR, renamed to OUT_DIR when complete:
a refused or failed export leaves nothing behind, and an earlier export stays as it was; an
OUT_DIR that holds what the export reads (the checkpoint, a file it was made from, the
shortlist) is refused before any work. A full disk is one line, whichever library was writing
(`files.atomic_path`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transformer_mt.artifacts import InferenceBundle, load_for_inference
from transformer_mt.config import ModelConfig
from transformer_mt.data.specials import SpecialTokens
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.files import check_output_folder, output_folder
from transformer_mt.interop.export_ct2 import export_ctranslate2, export_inputs
from transformer_mt.interop.hf_m2m100 import SPM_FILE, m2m100_limits, to_m2m100
from transformer_mt.interop.hf_marian import MARIAN, to_marian
from transformer_mt.interop.import_generation import generation_keys
from transformer_mt.interop.limits import check_expressible

FORMATS = ("hf", "ctranslate2")


def _write_vocab(tokenizer: Tokenizer, path: Path) -> None:
    """Marian's vocab.json maps pieces to ids: an imported model's own table (rows it numbers
    no piece with stay out), else SentencePiece's ids, kept as they are."""
    vocab = tokenizer.pieces
    if vocab is None:
        vocab = {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    path.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")


def _one_vocabulary(src: Tokenizer, tgt: Tokenizer) -> bool:
    """Whether both sides number their pieces alike (Marian's shared vocab.json): one table,
    even with two SentencePiece models (multilingual OPUS-MT), or one SentencePiece model."""
    if src.pieces is None and tgt.pieces is None:
        return src.model_bytes == tgt.model_bytes
    return src.pieces == tgt.pieces


def hf_family(cfg: ModelConfig) -> str:
    """The class `export_hf` writes: M2M100's ("m2m100") for a pre-norm model with fairseq's
    sinusoids (NLLB / M2M100 imports), else Marian's ("marian")."""
    return "m2m100" if cfg.pre_norm and cfg.positions == "sinusoidal_fairseq" else "marian"


def export_hf(checkpoint: str | Path, out_dir: str | Path) -> tuple[Path, list[str]]:
    """Write a Hugging Face model + tokenizer directory equivalent to `checkpoint`: Marian, or
    M2M100 with an NllbTokenizer (`hf_family`), whose generation config searches as the
    checkpoint's decode section does; returns it with a line for each decode setting
    `generate` cannot follow (`generation_keys`).

    Raises:
        TmtError: transformers is missing, the model uses options the family lacks, an M2M100
            model's tokenizer is not numbered as NllbTokenizer numbers it, or `out_dir` holds
            other files (see `output_folder`).
    """
    if importlib.util.find_spec("transformers") is None:
        raise TmtError(
            "the Hugging Face export needs transformers: pip install 'transformer_mt[hf]'"
        )
    bundle = load_for_inference(checkpoint)
    cfg = bundle.model.cfg
    if hf_family(cfg) == "m2m100":
        # The tokenizer first: a model trained here cannot change it, and a refusal of its
        # settings alone had sent users to retrain for the next refusal.
        _check_nllb_tokenizer(bundle)
        check_expressible(m2m100_limits(bundle.model.pad_id), cfg)
        write = _write_m2m100
    else:
        check_expressible(MARIAN, cfg)
        write = _write_marian
    specials = bundle.specials
    search, notes = generation_keys(
        bundle.config.decode, cfg.max_positions, specials.never, specials.unk
    )
    inputs = export_inputs(checkpoint)
    check_output_folder(out_dir, inputs, marker="config.json")  # before converting
    with output_folder(out_dir, inputs) as tmp, _quiet_transformers():
        write(bundle, tmp, search)
    return Path(out_dir), notes


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Writing without transformers' progress bar ("Writing model shards") and its advice to
    install sacremoses (a Marian tokenizer only uses it to translate, not to be saved): the
    export's own output is the line that says where it went, or one error line."""
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
            yield
    finally:
        if bar:
            hf_logging.enable_progress_bar()


def _write_marian(bundle: InferenceBundle, out: Path, search: dict[str, Any]) -> None:
    """The Marian model and tokenizer files of `bundle`, into the folder `out`, its generation
    config holding the `search` settings (`generation_keys`)."""
    from transformers import MarianTokenizer

    specials = bundle.specials
    src, tgt = bundle.src_tokenizer, bundle.tgt_tokenizer
    hf_model = to_marian(bundle.model, bos_id=specials.bos, eos_id=specials.eos)
    hf_model.generation_config.update(**search)
    hf_model.save_pretrained(out)
    joint = _one_vocabulary(src, tgt)
    (out / "source.spm").write_bytes(src.model_bytes)
    (out / "target.spm").write_bytes(tgt.model_bytes)
    _write_vocab(src, out / "vocab.json")
    target_vocab = None
    if not joint:
        target_vocab = out / "target_vocab.json"
        _write_vocab(tgt, target_vocab)
    data = bundle.config.data
    tokenizer = MarianTokenizer(
        source_spm=str(out / "source.spm"),
        target_spm=str(out / "target.spm"),
        vocab=str(out / "vocab.json"),
        target_vocab_file=None if target_vocab is None else str(target_vocab),
        source_lang=data.src_lang,
        target_lang=data.tgt_lang,
        unk_token=src.id_to_piece(specials.unk),
        eos_token=src.id_to_piece(specials.eos),
        pad_token=src.id_to_piece(specials.pad),
        separate_vocabs=not joint,
        model_max_length=bundle.config.model.max_positions,
    )
    tokenizer.save_pretrained(out)


def _check_nllb_tokenizer(bundle: InferenceBundle) -> None:
    """Refuse, before writing anything, a tokenizer NllbTokenizer cannot be: two of them, one
    numbered by SentencePiece's own ids (a model trained here), or one without language codes.

    Raises:
        TmtError: naming what is missing.
    """
    src, tgt = bundle.src_tokenizer, bundle.tgt_tokenizer
    problem = None
    if src.model_bytes != tgt.model_bytes or src.table != tgt.table:
        problem = "source and target tokenizers differ; NllbTokenizer is one for both"
    elif src.table is None:
        problem = (
            "the tokenizer numbers pieces by SentencePiece's own ids; NllbTokenizer numbers "
            "them past fairseq's <s> <pad> </s> <unk> (an imported NLLB model's table)"
        )
    elif not bundle.specials.language_tags:
        problem = "the model has no language codes; NllbTokenizer frames every text with one"
    if problem:
        raise TmtError(f"cannot export to Hugging Face M2M100: {problem}")


def _write_m2m100(bundle: InferenceBundle, out: Path, search: dict[str, Any]) -> None:
    """The M2M100 model and NllbTokenizer files of `bundle`, into the folder `out`, its
    generation config holding the `search` settings (`generation_keys`)."""
    specials = bundle.specials
    tokenizer = _write_nllb_tokenizer(bundle, out)
    hf_model = to_m2m100(bundle.model, bos_id=specials.bos, eos_id=specials.eos)
    generation = hf_model.generation_config
    # bos_token_id is NLLB's <s>, which M2M100 reads only without a decoder_start_token_id;
    # the decoder starts from specials.bos (NLLB's </s>).
    hf_model.config.bos_token_id = generation.bos_token_id = tokenizer.bos_token_id
    generation.decoder_start_token_id = specials.bos
    generation.forced_bos_token_id = None  # the target language's code: per request
    generation.update(**search)
    hf_model.save_pretrained(out)


def _write_nllb_tokenizer(bundle: InferenceBundle, out: Path) -> Any:
    """Write sentencepiece.bpe.model and the NllbTokenizer made from it, with the table's
    added special tokens (language codes, <mask>) at the table's ids; return the tokenizer.

    Raises:
        TmtError: the tokenizer numbers a piece otherwise than the model's table, naming it.
    """
    from transformers import NllbTokenizer

    table = bundle.src_tokenizer.table
    specials = bundle.specials
    (out / SPM_FILE).write_bytes(bundle.src_tokenizer.model_bytes)
    (out / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "NllbTokenizer"}), encoding="utf-8"
    )
    piece_of = {i: piece for piece, i in table.ids.items()}
    added = _added_tokens(piece_of, table.skip)
    codes = [piece_of[i] for i in sorted(specials.language_tags.values())]
    data = bundle.config.data
    tokenizer = NllbTokenizer.from_pretrained(
        out,
        added_tokens_decoder=added,
        extra_special_tokens=codes,
        src_lang=_code_piece(specials, piece_of, data.src_lang) or codes[0],
        tgt_lang=_code_piece(specials, piece_of, data.tgt_lang),
        model_max_length=bundle.config.model.max_positions,
    )
    _check_numbering(tokenizer.get_vocab(), table.ids)
    named = {"pad": tokenizer.pad_token_id, "unk": tokenizer.unk_token_id}
    named["eos"] = tokenizer.eos_token_id
    for name, token_id in named.items():
        if token_id != getattr(specials, name):
            raise TmtError(
                f"cannot export the tokenizer as NllbTokenizer: its {name} id is {token_id}, "
                f"the model's {getattr(specials, name)}"
            )
    tokenizer.save_pretrained(out)
    return tokenizer


def _added_tokens(piece_of: dict[int, str], special: frozenset[str]) -> dict[int, Any]:
    """The special pieces past fairseq's four (which the conversion from SentencePiece numbers
    itself) as `AddedToken`s by id, so that they are added in id order; the mask token is made
    as NllbTokenizer makes its own (it takes the space before it)."""
    from transformers import AddedToken

    added = {}
    for token_id in sorted(piece_of):
        piece = piece_of[token_id]
        if token_id > 3 and piece in special:
            mask = piece == "<mask>"
            added[token_id] = AddedToken(piece, special=True, normalized=mask, lstrip=mask)
    return added


def _code_piece(specials: SpecialTokens, piece_of: dict[int, str], code: str) -> str | None:
    """The token of language `code` (NLLB's `fra_Latn`, M2M100's `__fr__`), None if unknown."""
    token_id = specials.language_tags.get(code)
    return None if token_id is None else piece_of[token_id]


def _check_numbering(theirs: dict[str, int], ours: dict[str, int]) -> None:
    """Raise TmtError naming the first piece (by our id) the two numberings disagree on."""
    for piece in sorted(ours.keys() | theirs.keys(), key=lambda p: ours.get(p, theirs.get(p))):
        if ours.get(piece) != theirs.get(piece):
            raise TmtError(
                f"cannot export the tokenizer as NllbTokenizer: {piece!r} is id "
                f"{ours.get(piece)} in the model and {theirs.get(piece)} in NllbTokenizer's "
                "numbering (None: absent)"
            )


def export(
    checkpoint: str | Path,
    out_dir: str | Path,
    fmt: str,
    quantize: str | None,
    shortlist: str | Path | None = None,
) -> tuple[Path, list[str]]:
    """Dispatch on `fmt` (one of FORMATS); `quantize` is CTranslate2's weight type and
    `shortlist` its vocabulary map. Returns the folder written and the notes on what the
    format's search does otherwise (Hugging Face's generation config; none for CTranslate2,
    whose search settings are given at each call).

    Raises:
        SettingError: a format not in FORMATS, or an option the format does not take.
    """
    if fmt not in FORMATS:
        raise SettingError("fmt", fmt, f"choose one of {', '.join(FORMATS)}")
    if fmt == "hf":
        if quantize:
            raise SettingError("quantize", quantize, "applies to format ctranslate2 only")
        if shortlist:
            raise SettingError("shortlist", shortlist, "applies to format ctranslate2 only")
        return export_hf(checkpoint, out_dir)
    return export_ctranslate2(checkpoint, out_dir, quantize, shortlist), []
