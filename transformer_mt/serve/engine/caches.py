"""Bounded least-recently-used caches, with the hit and miss counts /metrics reports, and the
key of the translation cache."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

from transformer_mt.config import DecodeConfig
from transformer_mt.inference.languages import Direction

V = TypeVar("V")


def translation_key(
    text: str,
    prefix: str,
    direction: Direction,
    decode: DecodeConfig,
    constraints: Sequence[str] = (),
    scope: str | None = None,
) -> tuple:
    """The translation cache's key: the text, its forced prefix, the language tags of its
    direction (so that two targets never share an entry, while directions a model is told
    alike do), every decode setting that can change the translation
    (`DecodeConfig.output_settings`), the target phrases it must contain, and the scope of
    who asked (`Sentence.cache_source`: an answer from the cache is faster, and would tell
    one API key what another has translated)."""
    tags = (direction.source_prefix, direction.target_prefix)
    return (scope, text, prefix, *tags, *decode.output_settings(), tuple(constraints))


class LruCache(Generic[V]):
    """At most `capacity` entries (0: caches nothing); a get or put makes an entry the most
    recent, a put beyond the bound evicts the least recent. Not thread-safe: one owner."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> V | None:
        value = self._entries.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        return value

    def put(self, key: Hashable, value: V) -> None:
        if self.capacity <= 0:
            return
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
