"""A SentencePiece model trained elsewhere (`tokenizer.model_file`), renumbered to this
toolkit's special ids and used as it is.

A model from `spm_train`, another toolkit or a team's pipeline numbers its specials as its
trainer was told: spm_train's defaults are unk 0, bos 1, eos 2 and no pad, while the model,
the loss and the search here read pad 0, unk 1, bos 2, eos 3 (`data/tokenizer.py`). Rather than
a lookup table on every encode, the model itself is renumbered once: its pieces are reordered
in its protobuf (SentencePiece's own `sentencepiece_model_pb2`, read with `protobuf`) with pad,
unk, bos and eos first, each added as a control piece where the model has none, and every
other piece after them in its own order. Each piece keeps its score and type, and BPE merges
and unigram probabilities go by score, never by id, so the renumbered model segments every
text as the original does (tests/data/test_tokenizer_adopt.py compares them). The language
tags and the back-translation tag a config needs are appended as user-defined pieces when
the model lacks them, as training would have made them.

The renumbered model is saved into the run directory as `spm-<role>-<hash>.model`, like a
trained one, and travels in the checkpoints from there: translation never reads the original.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import sentencepiece as spm

from transformer_mt.config import TokenizerConfig
from transformer_mt.data.specials import language_tag
from transformer_mt.data.tokenizer import Tokenizer, TokenizerError
from transformer_mt.data.tokenizer_training import TokenizerPair
from transformer_mt.errors import one_line
from transformer_mt.files import atomic_open
from transformer_mt.text_files import file_problem

if TYPE_CHECKING:
    from sentencepiece.sentencepiece_model_pb2 import ModelProto

log = logging.getLogger(__name__)

# SentencePiece's piece types (sentencepiece_model.proto).
_UNKNOWN, _CONTROL, _USER_DEFINED = 2, 3, 4
# protobuf reads no message of 2 GiB or more: a larger file is read no further.
_MAX_MESSAGE = 2**31
# pad, unk, bos, eos (ids 0-3): the name of the piece a model lacking one gets, and the type
# each has.
_SPECIALS = (("<pad>", _CONTROL), ("<unk>", _UNKNOWN), ("<s>", _CONTROL), ("</s>", _CONTROL))


def adopt_tokenizers(
    cfg: TokenizerConfig, run_dir: str | Path, symbols: Sequence[str] = ()
) -> TokenizerPair:
    """The tokenizers of `cfg.model_file` (and `cfg.tgt_model_file`), renumbered and saved
    into `run_dir`.

    Args:
        symbols: pieces besides the language tags that must stay whole (the back-translation
            tag of tagged training sources), added to a model that lacks them.

    Raises:
        TokenizerError: a file that is not a readable SentencePiece model, or one that cannot
            hold the pieces the config needs, naming its key and path.
    """
    wanted = [*(language_tag(code) for code in cfg.language_tags), *symbols]
    models = {"joint" if cfg.joint else "src": ("tokenizer.model_file", cfg.model_file)}
    if not cfg.joint:
        models["tgt"] = ("tokenizer.tgt_model_file", cfg.tgt_model_file)
    paths = {}
    for role, (key, path) in models.items():
        model = renumbered_model(key, str(path), wanted)
        if cfg.bpe_dropout and _model_type(model) != "bpe":
            raise TokenizerError(
                f"{key} {path}: tokenizer.bpe_dropout needs a BPE model, and this one is "
                f"{_model_type(model)}; set tokenizer.bpe_dropout: 0"
            )
        paths[role] = _save(model, role, Path(run_dir))
        pieces = f"{len(model.pieces):,}"
        log.info("tokenizer %s: %s renumbered (%s pieces)", paths[role], path, pieces)
    src = Tokenizer.load(paths.get("joint") or paths["src"])
    if cfg.joint:
        return TokenizerPair(src, src, paths["joint"], paths["joint"])
    return TokenizerPair(src, Tokenizer.load(paths["tgt"]), paths["src"], paths["tgt"])


def changed_files(
    cfg: TokenizerConfig, held: Mapping[str, bytes], symbols: Sequence[str] = ()
) -> list[str]:
    """The given model files ("key path") that `adopt_tokenizers` would no longer turn into
    the models `held` ("src", "tgt": a checkpoint's), so a resumed run, which keeps its
    checkpoint's, can say it does not use them. A file that cannot be read is not counted: the
    checkpoint holds its tokenizers, and needs no file."""
    wanted = [*(language_tag(code) for code in cfg.language_tags), *symbols]
    files = {"src": ("tokenizer.model_file", cfg.model_file)}
    files["tgt"] = files["src"] if cfg.joint else ("tokenizer.tgt_model_file", cfg.tgt_model_file)
    changed = []
    for side, (key, path) in files.items():
        if path is None:
            continue
        try:
            model = renumbered_model(key, str(path), wanted)
        except TokenizerError:
            continue
        if model.SerializeToString(deterministic=True) != held[side]:
            changed.append(f"{key} {path}")
    return list(dict.fromkeys(changed))


def model_sizes(cfg: TokenizerConfig) -> tuple[int, int]:
    """Pieces of the source and target vocabularies a run of `cfg` will have, at least:
    `tokenizer.vocab_size` for trained ones, the given models' own counts (before the specials
    and tags renumbering may add) for given ones.

    Raises:
        TokenizerError: as `adopt_tokenizers`, for an unreadable model.
    """
    if cfg.model_file is None:
        return cfg.vocab_size, cfg.vocab_size
    src = len(_read("tokenizer.model_file", cfg.model_file).pieces)
    if cfg.tgt_model_file is None:
        return src, src
    return src, len(_read("tokenizer.tgt_model_file", cfg.tgt_model_file).pieces)


def renumbered_model(key: str, path: str, wanted: Sequence[str] = ()) -> ModelProto:
    """The model of `path` with pad, unk, bos, eos at ids 0-3, and the pieces `wanted` present
    as user-defined pieces (found in text, never split).

    Raises:
        TokenizerError: not a SentencePiece model, or a special missing from the model whose
            name another piece already has, naming `key` and `path`.
    """
    proto = _read(key, path)
    processor = _processor(key, path, proto.SerializeToString())
    found = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
    present = {piece.piece for piece in proto.pieces}
    head = []
    for (name, kind), index in zip(_SPECIALS, found, strict=True):
        piece = proto.SentencePiece()
        if index >= 0:
            piece.CopyFrom(proto.pieces[index])
        elif name in present:
            raise TokenizerError(
                f"{key} {path}: the model has no special piece for {name} but a piece of its "
                f"own named {name}; retrain it with an id for each special (SentencePiece's "
                "pad_id, unk_id, bos_id and eos_id options)"
            )
        else:
            piece.piece, piece.score = name, 0.0
        piece.type = kind
        head.append(piece)
    moved = {index for index in found if index >= 0}
    rest = [piece for index, piece in enumerate(proto.pieces) if index not in moved]
    for piece in rest:
        if piece.piece in wanted:
            piece.type = _USER_DEFINED
    added = [
        proto.SentencePiece(piece=name, score=0.0, type=_USER_DEFINED)
        for name in dict.fromkeys(wanted)
        if name not in present
    ]
    del proto.pieces[:]
    proto.pieces.extend([*head, *rest, *added])
    spec = proto.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = range(4)
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = (p.piece for p in head)
    return proto


def _read(key: str, path: str) -> ModelProto:
    """The protobuf of the SentencePiece model file `path` (`key`: the setting naming it)."""
    problem = file_problem(Path(path))
    if problem is not None:
        what = "not found" if problem == "missing" else f"is {problem}"
        raise TokenizerError(f"{key} {path}: {what}")
    try:
        from sentencepiece import sentencepiece_model_pb2
    except Exception as err:  # protobuf missing (ImportError) or older than the generated code
        # sentencepiece ships (protobuf's VersionError)
        raise TokenizerError(
            f"{key}: reading a SentencePiece model needs protobuf as new as sentencepiece "
            f"{spm.__version__} was built with ({one_line(err)}); pip install -U protobuf"
        ) from None
    if Path(path).stat().st_size >= _MAX_MESSAGE:
        raise TokenizerError(f"{key} {path}: not a SentencePiece model (2 GiB or larger)")
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(Path(path).read_bytes())
    except Exception as err:  # protobuf's DecodeError, or what a damaged file gives
        raise TokenizerError(f"{key} {path}: not a SentencePiece model ({one_line(err)})") from None
    if not proto.pieces:
        raise TokenizerError(f"{key} {path}: not a SentencePiece model (no pieces)")
    return proto


def _processor(key: str, path: str, data: bytes) -> spm.SentencePieceProcessor:
    """SentencePiece's own reading of the model: it refuses what protobuf parses but
    SentencePiece cannot use (no unknown piece, a piece twice)."""
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(data)
    except (RuntimeError, OSError) as err:
        raise TokenizerError(f"{key} {path}: not a SentencePiece model ({one_line(err)})") from None
    return processor


def _model_type(proto: ModelProto) -> str:
    return proto.trainer_spec.ModelType.Name(proto.trainer_spec.model_type).lower()


def _save(proto: ModelProto, role: str, run_dir: Path) -> Path:
    """Write the renumbered model as `spm-<role>-<hash of its bytes>.model` (once)."""
    data = proto.SerializeToString(deterministic=True)
    path = run_dir / f"spm-{role}-{hashlib.sha256(data).hexdigest()[:16]}.model"
    if not path.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, "wb") as f:
            f.write(data)
    return path
