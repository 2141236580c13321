"""Several models of one vocabulary searched as one model: an ensemble.

At every decoding step each member scores the next token and the ensemble's log-probability of
a token is the mean of the members' (as Marian's `--weights` with equal weights, and OpenNMT's
ensemble decoding; fairseq averages probabilities instead). Search sees one `DecodingModel`
(search/protocol.py), so beam search, greedy search, forced prefixes and constraints run
unchanged: the members' encoder outputs travel as one memory tensor, concatenated along the
feature axis and split again at each step (search keeps memory rows aligned with its sources
and never reads the features), and their decoding caches as one `EnsembleCache`.

The members must read and write the same pieces: the same tokenizers and special ids
(`check_members` refuses others by name), or a token id would mean another piece in each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from transformer_mt.artifacts import InferenceBundle, load_for_inference
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.files import repeated_file
from transformer_mt.inference.running import inference_model, load_shortlist
from transformer_mt.model import Seq2SeqTransformer
from transformer_mt.shortlist.select import Shortlist


@dataclasses.dataclass
class EnsembleCache:
    """The members' decoding caches, in member order; reordered together."""

    members: list

    def reorder(self, indices: Tensor, sources: Tensor | None = None) -> EnsembleCache:
        """`DecoderCache.reorder` of every member (see search/protocol.py)."""
        self.members = [cache.reorder(indices, sources) for cache in self.members]
        return self


class _EnsembleDecoder:
    """What `inference.running.search_options` asks of a model's decoder: a new cache (in a
    dtype), here one per member."""

    def __init__(self, members: Sequence[Seq2SeqTransformer]):
        self.members = members

    def new_cache(self, dtype: torch.dtype | None = None) -> EnsembleCache:
        return EnsembleCache([m.decoder.new_cache(dtype=dtype) for m in self.members])


class Ensemble(nn.Module):
    """Models of one vocabulary decoding together, each step the mean of their log-probs.

    `cfg` is the first member's with the shortest position table of all, so that no
    hypothesis needs a position a member lacks.
    """

    def __init__(self, members: Sequence[Seq2SeqTransformer]):
        super().__init__()
        if len(members) < 2:
            raise SettingError("checkpoint", len(members), "an ensemble needs two models or more")
        self.members = nn.ModuleList(members)
        shortest = min(m.cfg.max_positions for m in members)
        self.cfg = dataclasses.replace(members[0].cfg, max_positions=shortest)
        self.widths = [m.cfg.d_model for m in members]
        self.decoder = _EnsembleDecoder(members)

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> Tensor:
        """Each member's memory, (B, S, D_i), concatenated: (B, S, sum D_i)."""
        return torch.cat([m.encode(src_ids, src_mask) for m in self.members], dim=-1)

    def source_rows(self, sources: Tensor, n_sources: int) -> object:
        """The members' layout of rows over sources (one: they are the same model class)."""
        return self.members[0].source_rows(sources, n_sources)

    def decode_step(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        sources: object,
        cache: EnsembleCache | None,
        vocab: object | None = None,
    ) -> tuple[Tensor, EnsembleCache]:
        """One step of every member on its part of `memory`: (R, V) the mean of their log-probs,
        and their caches (see `Seq2SeqTransformer.decode_step`)."""
        memories = memory.split(self.widths, dim=-1)
        caches = [None] * len(self.members) if cache is None else cache.members
        steps = [
            member.decode_step(tgt_ids, mine, src_mask, sources, own, vocab)
            for member, mine, own in zip(self.members, memories, caches, strict=True)
        ]
        log_probs = torch.stack([lp for lp, _ in steps]).mean(dim=0)  # (R, V)
        return log_probs, EnsembleCache([c for _, c in steps])


def load_members(paths: Sequence[str], device: torch.device) -> list[InferenceBundle]:
    """The checkpoints `paths` (one, or an ensemble's), loaded.

    Raises:
        SettingError: a checkpoint given twice (by name, link or hard link), before any is
            loaded: an ensemble of a model with itself translates as the model alone, at
            twice the cost.
    """
    twice = repeated_file(paths)
    if twice is not None:
        raise SettingError(
            "checkpoint",
            twice[0],
            f"given twice (also as {twice[1]}): an ensemble of a model with itself translates "
            "as that model alone, at twice the cost",
        )
    return [load_for_inference(path, device) for path in paths]


def check_members(bundles: Sequence[InferenceBundle], paths: Sequence[str]) -> None:
    """Refuse an ensemble of checkpoints that do not share what a token id means.

    Raises:
        SettingError: naming the checkpoint whose tokenizers, special ids or direction differ
            from the first one's, or a member that cannot be ensembled (a position-less attention
            pattern is fine; a different target vocabulary is not).
    """
    first = bundles[0]
    for bundle, path in zip(bundles[1:], paths[1:], strict=True):
        for what, mine, theirs in (
            ("source tokenizer", _meaning(bundle.src_tokenizer), _meaning(first.src_tokenizer)),
            ("target tokenizer", _meaning(bundle.tgt_tokenizer), _meaning(first.tgt_tokenizer)),
            ("special ids", bundle.specials.to_dict(), first.specials.to_dict()),
        ):
            if mine != theirs:
                raise SettingError(
                    "checkpoint",
                    path,
                    f"its {what} differs from {paths[0]}'s: an ensemble's models must share "
                    "tokenizers and special ids",
                )
        if _direction(bundle) != _direction(first):  # one vocabulary serves both ways
            (src, tgt), (first_src, first_tgt) = _direction(bundle), _direction(first)
            raise SettingError(
                "checkpoint",
                path,
                f"translates {src}->{tgt}, {paths[0]} {first_src}->{first_tgt}: an ensemble's "
                "models must translate the same direction",
            )


# What a SentencePiece model records of its training and nothing of its ids: the text files,
# the output name and the threads it was trained with.
_TRAINING_RECORDS = ("input", "model_prefix", "num_threads")
# The special pieces and ids a trained model may leave at their defaults and an adopted one
# (data/tokenizer_adopt.py) writes out.
_SPECIAL_FIELDS = ("unk_id", "bos_id", "eos_id", "pad_id")
_SPECIAL_FIELDS += ("unk_piece", "bos_piece", "eos_piece", "pad_piece")


def _meaning(tokenizer: Tokenizer) -> bytes:
    """What `tokenizer`'s ids mean, as bytes to compare: its SentencePiece model without the
    records of its training and with its specials written out, and its piece table (an
    imported model's numbering). The model file's own bytes differ between a trained model and
    a copy adopted from it (`tokenizer.model_file`), which segment and number alike."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(tokenizer.model_bytes)
    spec = proto.trainer_spec
    for name in _TRAINING_RECORDS:
        spec.ClearField(name)
    for name in _SPECIAL_FIELDS:
        setattr(spec, name, getattr(spec, name))
    table = b"" if tokenizer.table is None else tokenizer.table.to_json()
    return proto.SerializeToString(deterministic=True) + b"\0" + table


def _direction(bundle: InferenceBundle) -> tuple[str, str] | None:
    """The one direction a model without language tags translates; None for a tagged model,
    which is told each text's."""
    if bundle.specials.language_tags:
        return None
    return bundle.config.data.src_lang, bundle.config.data.tgt_lang


def ensemble_model(
    bundles: Sequence[InferenceBundle],
    paths: Sequence[str],
    quantize: str | None,
    device: torch.device,
) -> tuple[Ensemble, torch.dtype | None]:
    """The models of `bundles` as one `Ensemble`, each set up to run as a single model would
    (`running.inference_model`: packed float32 or int8 layers), and the cache dtype.

    Raises:
        SettingError: checkpoints that do not share tokenizers and special ids.
    """
    check_members(bundles, paths)
    prepared = [inference_model(bundle.model, quantize, device) for bundle in bundles]
    return Ensemble([model for model, _ in prepared]), prepared[0][1]


def prepared_model(
    bundles: Sequence[InferenceBundle],
    paths: Sequence[str],
    quantize: str | None,
    device: torch.device,
    shortlist: str | Path | None,
    aligns: bool,
) -> tuple[Seq2SeqTransformer | Ensemble, torch.dtype | None, Shortlist | None]:
    """The model `Translator.from_checkpoint` searches: the one of `bundles` as it runs
    translations (`running.inference_model`), or their `Ensemble`; its cache dtype; and the
    `shortlist` file read over its float rows, before packing or int8 replace them.

    Raises:
        SettingError: a shortlist for an ensemble (each member would need its own), or as
            `ensemble_model` and `running.load_shortlist`.
        TmtError: alignments or unknown pieces replaced (`aligns`) asked of an ensemble,
            which has no one cross-attention to read them from.
    """
    if len(paths) > 1 and shortlist is not None:
        raise SettingError("shortlist", None, f"an ensemble of {len(paths)} takes none")
    if len(paths) > 1 and aligns:
        raise TmtError(
            f"an ensemble of {len(paths)} checkpoints gives no alignments and replaces no "
            "unknown pieces (both read one model's cross-attention); give one checkpoint"
        )
    listed = None if shortlist is None else load_shortlist(shortlist, bundles[0], device)
    if len(paths) > 1:
        return (*ensemble_model(bundles, paths, quantize, device), listed)
    return (*inference_model(bundles[0].model, quantize, device), listed)
