"""SentencePiece subword tokenizer: train on the training corpus, load, encode, decode.

Special ids are fixed for every model this toolkit trains, so the model, the loss and the search
can use them as constants without asking the tokenizer:

    PAD_ID = 0   padding (never produced by `encode`)
    UNK_ID = 1   unknown piece (characters left out by `character_coverage`)
    BOS_ID = 2   beginning of a target sentence (first decoder input)
    EOS_ID = 3   end of sentence (appended to source and target)

`encode` never adds BOS/EOS; `data/batching.py` adds them where the model needs them.

An imported model (OPUS-MT, NLLB) segments with SentencePiece too, but numbers the pieces by
a table of its own (Marian's vocab.json; NLLB's ids shifted past fairseq's specials): such a
`Tokenizer` carries a `PieceTable`, piece -> id, and looks every piece up there (a piece the
table lacks is its `<unk>`; a leading `>>xxx<<` language tag is one piece, as in Marian). Its
special ids are the model's (`data/specials.py`), not the above.

Training a run's models is `data/tokenizer_training.py`'s. Checkpoints embed
`Tokenizer.model_bytes` (and a table), which `Tokenizer.from_bytes` turns back into a tokenizer.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import sentencepiece as spm

from transformer_mt.errors import TmtError, one_line

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

log = logging.getLogger(__name__)


class TokenizerError(TmtError):
    """A tokenizer cannot be trained or loaded (bad settings, unreadable model file)."""


class Tokenizer:
    """A loaded SentencePiece model; text in, ids out (no BOS/EOS), and back.

    `table` (None: SentencePiece's own ids) numbers the pieces by an imported model's table.
    """

    def __init__(
        self, model_bytes: bytes, name: str = "<bytes>", table: PieceTable | None = None
    ) -> None:
        self.name = name
        self.model_bytes = model_bytes
        self.table = table
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(model_bytes)
        except (RuntimeError, OSError, TypeError) as err:
            raise TokenizerError(f"{name}: not a SentencePiece model ({one_line(err)})") from None
        if table is not None:
            if "<unk>" not in table.ids:
                raise TokenizerError(f"{name}: the vocabulary has no <unk> piece")
            self._unk = table.ids["<unk>"]
            self._by_id = {i: p for p, i in table.ids.items()}
            self._skipped = {table.ids[p] for p in table.skip if p in table.ids}
            return
        if (self._sp.pad_id(), self._sp.unk_id(), self._sp.bos_id(), self._sp.eos_id()) != (
            PAD_ID,
            UNK_ID,
            BOS_ID,
            EOS_ID,
        ):
            raise TokenizerError(f"{name}: special ids differ from pad=0, unk=1, bos=2, eos=3")

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        path = Path(path)
        try:
            return cls(path.read_bytes(), name=str(path))
        except FileNotFoundError:
            raise TokenizerError(f"{path}: tokenizer model not found") from None

    @classmethod
    def from_bytes(cls, model_bytes: bytes, table: PieceTable | None = None) -> Tokenizer:
        return cls(model_bytes, table=table)

    def __reduce__(self) -> tuple:
        """Pickled as its model and table (into data-loading worker processes)."""
        return (Tokenizer, (self.model_bytes, self.name, self.table))

    @property
    def pieces(self) -> dict[str, int] | None:
        """An imported model's piece -> id numbering; None for SentencePiece's own."""
        return None if self.table is None else self.table.ids

    @property
    def vocab_size(self) -> int:
        if self.table is not None:
            return self.table.size
        return self._sp.get_piece_size()

    @property
    def sha256(self) -> str:
        """Checksum of the serialized model (and table); keys encoded-corpus caches."""
        digest = hashlib.sha256(self.model_bytes)
        if self.table is not None:
            digest.update(self.table.to_json())
        return digest.hexdigest()

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text], num_threads=1)[0]

    def encode_batch(self, texts: Sequence[str], num_threads: int = -1) -> list[list[int]]:
        """Encode many lines at once; SentencePiece spreads them over `num_threads` C++ threads."""
        if self.table is None:
            return self._sp.encode(list(texts), num_threads=num_threads)
        return [self._ids(row) for row in self._piece_rows(texts, num_threads)]

    def encode_pieces(self, text: str) -> list[str]:
        """The pieces of `text`, one per id of `encode(text)`: a piece the vocabulary lacks
        (an unknown id) as the characters it covers."""
        if self.table is None:
            return self._sp.encode(text, out_type=str)
        return self._piece_rows([text], 1)[0]

    def _piece_rows(self, texts: Sequence[str], num_threads: int) -> list[list[str]]:
        """The pieces of each text under a table, a leading language tag taken whole."""
        split = _leading_tag if self.table is not None and self.table.inline_tags else _no_tag
        tags, rest = zip(*map(split, texts), strict=True) if texts else ((), ())
        rows = self._sp.encode(list(rest), out_type=str, num_threads=num_threads)
        return [tag + row for tag, row in zip(tags, rows, strict=True)]

    def encode_dropout(self, texts: Sequence[str], dropout: float, seed: int) -> list[list[int]]:
        """BPE-dropout segmentations of `texts`: every merge is skipped with probability `dropout`.

        A pure function of (model, texts, dropout, seed) in every process, which exact resume
        needs: the merges are replayed here with a seeded Python generator, because the one
        behind SentencePiece's own sampling is salted per process (sentencepiece 0.2.3 gives
        each process other samples for one seed). Words are split where SentencePiece splits
        them; a word with a piece outside the merge table (unknown characters, byte fallback)
        keeps its deterministic pieces. Dropout 0 gives exactly `encode`'s ids.

        Raises:
            TokenizerError: the tokenizer numbers its pieces by an imported model's table.
        """
        if self.table is not None:
            raise TokenizerError(
                f"{self.name}: BPE-dropout needs this toolkit's own SentencePiece ids, not an "
                "imported model's table; set tokenizer.bpe_dropout: 0"
            )
        rng, merges = random.Random(seed), self._merges
        rows = []
        for pieces in self._sp.encode(list(texts), out_type=str):
            row: list[int] = []
            for word in _words(pieces):
                text = "".join(word)
                if all(p in merges for p in word) and all(c in merges for c in text):
                    row += _merge_with_dropout(text, merges, dropout, rng)
                else:
                    row += [self._sp.piece_to_id(p) for p in word]
            rows.append(row)
        return rows

    @cached_property
    def _merges(self) -> dict[str, tuple[float, int]]:
        """Piece -> (score, id) of every piece BPE can merge into (not special, byte, unused)."""
        sp = self._sp
        return {
            sp.id_to_piece(i): (sp.get_score(i), i)
            for i in range(sp.get_piece_size())
            if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i) or sp.is_byte(i))
        }

    def decode(self, ids: Sequence[int], pieces: Mapping[int, str] | None = None) -> str:
        """Ids back to text; PAD/BOS/EOS are skipped by SentencePiece (they are control pieces;
        with a table, the ids of special and language-tag pieces are skipped).

        `pieces`: position -> the piece written there instead of its id's (a source piece
        copied over an unknown one, `inference.unknowns`); a piece the vocabulary lacks comes
        out as written, its word-boundary marks made spaces.
        """
        if self.table is not None:
            # A shared table holds pieces this model lacks (the other side's): they come out
            # as written, their word-boundary marks made spaces, as Marian's tokenizer does.
            kept = [
                pieces[k] if pieces and k in pieces else self._by_id[i]
                for k, i in enumerate(ids)
                if (pieces and k in pieces) or (i in self._by_id and i not in self._skipped)
            ]
            text = self._sp.decode_pieces(kept)
            return text.replace("\u2581", " ").strip()
        if pieces:
            written = [pieces.get(k) or self._sp.id_to_piece(i) for k, i in enumerate(ids)]
            text = self._sp.decode_pieces(written).replace("\u2581", " ")
            # SentencePiece drops the space its own first piece starts with, not a copied one's
            return text[1:] if 0 in pieces and text.startswith(" ") else text
        return self._sp.decode(list(ids))

    def normalize(self, text: str) -> str:
        """The text as the model sees it (NFKC, whitespace squeezed): what `decode` returns."""
        # SentencePiece writes spaces as U+2581 and adds one as a word-boundary prefix.
        return self._sp.normalize(text).replace("\u2581", " ").strip(" ")

    def piece_id(self, piece: str) -> int:
        """The id of `piece` (SentencePiece's, or the table's); unk's when it has none."""
        if self.table is not None:
            return self.table.ids.get(piece, self._unk)
        return self._sp.piece_to_id(piece)

    def id_to_piece(self, token_id: int) -> str:
        if self.table is not None:
            return self._by_id.get(token_id, "<unk>")
        return self._sp.id_to_piece(token_id)

    def _ids(self, pieces: list[str]) -> list[int]:
        ids = self.table.ids  # type: ignore[union-attr]
        return [ids.get(p, self._unk) for p in pieces]


@dataclass(frozen=True)
class PieceTable:
    """An imported model's numbering of SentencePiece pieces, stored in its checkpoint."""

    ids: dict[str, int]  # piece -> id
    size: int  # ids the model has (its embedding rows; some may number no piece)
    skip: frozenset[str] = frozenset()  # pieces decoding leaves out: specials, language tags
    # A leading `>>xxx<<` of the text is one piece (Marian's tokenizer reads the target
    # language there); elsewhere text is text.
    inline_tags: bool = False

    def to_json(self) -> bytes:
        data = {
            "ids": self.ids,
            "size": self.size,
            "skip": sorted(self.skip),
            "inline_tags": self.inline_tags,
        }
        return json.dumps(data, ensure_ascii=False, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, source: str) -> PieceTable:
        """Read `to_json`'s output.

        Raises:
            TokenizerError: not such a table, naming `source` (a checkpoint's key).
        """
        try:
            table = json.loads(data)
            ids, size = table["ids"], table["size"]
            ok = all(isinstance(p, str) and isinstance(i, int) for p, i in ids.items())
            if not ok or not isinstance(size, int) or max(ids.values(), default=-1) >= size:
                raise ValueError("ids must number pieces below size")
            return cls(ids, size, frozenset(table["skip"]), bool(table.get("inline_tags")))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
            raise TokenizerError(f"{source}: not a piece table ({one_line(err)})") from None


def _no_tag(text: str) -> tuple[list[str], str]:
    return [], text


def _leading_tag(text: str) -> tuple[list[str], str]:
    """A multilingual OPUS-MT source's `>>xxx<<` target-language tag, taken whole from the
    front of `text` as Marian's tokenizer takes it ([] when there is none), and the rest."""
    end = text.find("<<") if text.startswith(">>") else -1
    if end == -1:
        return [], text
    return [text[: end + 2]], text[end + 2 :]


def _words(pieces: list[str]) -> Iterator[list[str]]:
    """Group SentencePiece pieces into words: a word starts at a piece that starts with U+2581."""
    word: list[str] = []
    for piece in pieces:
        if piece.startswith("\u2581") and word:
            yield word
            word = []
        word.append(piece)
    if word:
        yield word


def _merge_with_dropout(
    word: str, merges: dict[str, tuple[float, int]], dropout: float, rng: random.Random
) -> list[int]:
    """SentencePiece's BPE over the characters of `word`, each merge skipped with `dropout`.

    As in SentencePiece: the adjacent pair forming the highest-scoring piece merges first
    (leftmost on ties); a skipped pair is gone until a neighbour's merge forms a new one
    (Provilkov et al., 2020).
    """
    symbols: list[str | None] = list(word)
    following = [*range(1, len(word)), -1]
    preceding = list(range(-1, len(word) - 1))
    agenda: list[tuple[float, int, str]] = []

    def propose(left: int) -> None:
        right = following[left]
        if left >= 0 and right >= 0:
            piece = symbols[left] + symbols[right]
            if piece in merges:
                heapq.heappush(agenda, (-merges[piece][0], left, piece))

    for i in range(len(word) - 1):
        propose(i)
    while agenda:
        _, left, piece = heapq.heappop(agenda)
        right = following[left]
        stale = symbols[left] is None or right < 0 or symbols[left] + symbols[right] != piece
        if stale or rng.random() < dropout:
            continue
        symbols[left], symbols[right] = piece, None
        following[left] = following[right]
        if following[right] >= 0:
            preceding[following[right]] = left
        propose(preceding[left])
        propose(left)
    return [merges[s][1] for s in symbols if s is not None]
