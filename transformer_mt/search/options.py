"""How a search runs apart from the user's `DecodeConfig`: special ids, the length cap, the
first cache and the random generator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor

from transformer_mt.search.protocol import ReorderableCache, SourceVocabulary

# The special ids of the models this toolkit trains (data/tokenizer.py), repeated here rather
# than imported so that search depends on the decoding protocol only; a model with others
# (an imported one) passes its own (data/specials.py).
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


@dataclass(frozen=True)
class SpecialIds:
    pad: int = PAD_ID  # pads finished rows' tokens
    bos: int = BOS_ID  # the decoder's first input
    eos: int = EOS_ID  # ends a hypothesis
    never: tuple[int, ...] = (PAD_ID, BOS_ID)  # ids no hypothesis may contain
    unk: int = UNK_ID  # the unknown piece (`DecodeConfig.disable_unk` forbids it)


OWN_IDS = SpecialIds()  # the models this toolkit trains


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs, apart from the user's `DecodeConfig`: the same for every mode."""

    ids: SpecialIds = field(default_factory=SpecialIds)
    # The most tokens the model can decode at all (its position table); None: no cap.
    max_len_cap: int | None = None
    # An empty cache for the first decoding step (e.g. one storing keys and values in a narrower
    # dtype); None: the model makes its own on the first step.
    new_cache: Callable[[], ReorderableCache] | None = None
    # Which target ids each sentence may produce (a shortlist), asked once per batch:
    # (src_ids (B, S), per sentence the ids that must stay: EOS, its forced prefix, its
    # constraints) -> what `decode_step` takes as `vocab`; None: the whole vocabulary.
    vocabulary: Callable[[Tensor, list[list[int]]], SourceVocabulary] | None = None


DEFAULT_OPTIONS = SearchOptions()
