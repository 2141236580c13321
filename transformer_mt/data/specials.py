"""The special token ids of a model: which id pads, ends a sentence, starts the decoder, and
which ids search must never produce.

They belong to the model's vocabulary, not to the code: the models this toolkit trains use
SentencePiece's pad 0 / unk 1 / bos 2 / eos 3 (`data/tokenizer.py`) and start the decoder
with bos, while an imported OPUS-MT model ends sentences with id 0 and starts its decoder with
its pad id, and NLLB starts it with eos. A checkpoint records them (`to_dict`); one written
before they were recorded holds this toolkit's own, which `SpecialTokens()` is.

Data (padding, the appended eos, the decoder's first input), training (the loss ignores pad),
search and the server (the first input, the end, the forbidden ids) and the exporters read
them from here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from transformer_mt.errors import SettingError, TmtError


@dataclass(frozen=True)
class SpecialTokens:
    """Special ids, the same on the source and the target side."""

    pad: int = PAD_ID  # fills batches; masked out of attention and the loss
    unk: int = UNK_ID  # a piece the vocabulary lacks
    bos: int = BOS_ID  # the decoder's first input (Marian: its pad; NLLB: its eos)
    eos: int = EOS_ID  # appended to every source, ends every target
    never: tuple[int, ...] = (PAD_ID, BOS_ID)  # ids search never produces
    # Language code -> id of its tag token (`>>fra<<` of multilingual OPUS-MT models).
    language_tags: dict[str, int] = field(default_factory=dict)
    # Whose tag starts every source: "target" (multilingual OPUS-MT: the language to
    # translate into), "source" (NLLB: the language of the text), "" (none).
    source_tag: str = ""
    # Whether the target language's tag is the first target token (NLLB), forced.
    target_tag: bool = False

    def to_dict(self) -> dict[str, Any]:
        """What a checkpoint stores (plain ints, lists and strings)."""
        data = asdict(self)
        data["never"] = list(self.never)
        return data

    @classmethod
    def from_dict(cls, data: object, source: str) -> SpecialTokens:
        """Read `to_dict`'s output; None (a checkpoint from before they were recorded): ours.

        Raises:
            TmtError: a field that is missing, unknown or not a non-negative int, naming it.
        """
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise TmtError(f"{source}: special tokens: expected a mapping, got {data!r}")
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise TmtError(f"{source}: special tokens: unknown field {unknown[0]!r}")
        for name in ("pad", "unk", "bos", "eos"):
            if not _is_id(data.get(name)):
                raise TmtError(
                    f"{source}: special tokens: {name} must be an id, got {data.get(name)!r}"
                )
        never = data.get("never", [])
        if not isinstance(never, list | tuple) or not all(_is_id(i) for i in never):
            raise TmtError(f"{source}: special tokens: never must be a list of ids, got {never!r}")
        tags = data.get("language_tags", {})
        if not isinstance(tags, dict) or not all(
            isinstance(k, str) and _is_id(v) for k, v in tags.items()
        ):
            raise TmtError(f"{source}: special tokens: language_tags must map codes to ids")
        if data.get("source_tag", "") not in SOURCE_TAGS:
            raise TmtError(
                f"{source}: special tokens: source_tag must be one of {SOURCE_TAGS}, got "
                f"{data.get('source_tag')!r}"
            )
        if not isinstance(data.get("target_tag", False), bool):
            raise TmtError(f"{source}: special tokens: target_tag must be true or false")
        return cls(
            pad=data["pad"],
            unk=data["unk"],
            bos=data["bos"],
            eos=data["eos"],
            never=tuple(never),
            language_tags=dict(tags),
            source_tag=data.get("source_tag", ""),
            target_tag=data.get("target_tag", False),
        )

    def language_prefixes(
        self, src_lang: str | None, tgt_lang: str | None
    ) -> tuple[list[int], list[int]]:
        """The ids that start every source and are forced to start every target, for a
        translation from `src_lang` into `tgt_lang` (None: not given); ([], []) for a model
        without language tags.

        Raises:
            SettingError: a language the model needs and was not given, or one it lacks, by
                its setting (src_lang, tgt_lang), listing the model's languages.
        """
        needed = {"target": "tgt_lang", "source": "src_lang"}.get(self.source_tag)
        wanted = {"tgt_lang": tgt_lang, "src_lang": src_lang}
        source = [] if needed is None else [self._tag(needed, wanted[needed])]
        target = [self._tag("tgt_lang", tgt_lang)] if self.target_tag else []
        return source, target

    def _tag(self, setting: str, code: str | None) -> int:
        if code not in self.language_tags:
            known = ", ".join(sorted(self.language_tags))
            problem = "the model needs it" if code is None else "the model has no such language"
            raise SettingError(setting, code, f"{problem}; it knows {known}")
        return self.language_tags[code]

    def check_vocabulary(self, src_size: int, tgt_size: int, source: str) -> None:
        """Raise TmtError naming the first id outside the vocabulary of the side that uses it
        (`src_size`, `tgt_size` entries)."""
        tags = [(f"language_tags.{code}", i) for code, i in self.language_tags.items()]
        both = [("pad", self.pad), ("unk", self.unk), ("eos", self.eos)]
        sides = {
            "source": (src_size, both + (tags if self.source_tag else [])),
            "target": (tgt_size, both + [("bos", self.bos)] + [("never", i) for i in self.never]),
        }
        if self.target_tag:
            sides["target"][1].extend(tags)
        for side, (size, named) in sides.items():
            for name, token in named:
                if token >= size:
                    raise TmtError(
                        f"{source}: special tokens: {name}={token} is outside the {side} "
                        f"vocabulary of {size} entries"
                    )


SOURCE_TAGS = ("", "source", "target")


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# The ids of every model this toolkit trains itself (and of checkpoints that record none).
OWN_SPECIALS = SpecialTokens()


def language_tag(code: str) -> str:
    """The piece of language `code`'s tag, `>>code<<`: the form of OPUS-MT's, so that imported
    multilingual models and ours take one path."""
    return f">>{code}<<"


# The piece that starts every source sentence of a tagged training source (`TrainSource.
# tagged`, tagged back-translation): a user-defined SentencePiece symbol, never produced.
BACK_TRANSLATION_TAG = "<BT>"


def tag_code(piece: str) -> str | None:
    """The language code of a tag piece (`language_tag`'s inverse); None for another piece."""
    found = _TAG.fullmatch(piece)
    return None if found is None else found.group(1)


_TAG = re.compile(r">>(.+)<<")


# The byte pieces of the C0 control characters and DEL. With `tokenizer.byte_fallback` the
# vocabulary can spell any character from its bytes, a newline or a tab too, which would break
# an output of one line per input line (and the TAB-separated ones); the text a model learns
# from never holds them (SentencePiece's normalisation removes them), so they are never
# produced.
CONTROL_BYTES = tuple(f"<0x{byte:02X}>" for byte in (*range(0x20), 0x7F))


def own_specials(tokenizer: Tokenizer, codes: Sequence[str]) -> SpecialTokens:
    """The special ids of a model trained here with `tokenizer.language_tags` `codes` (none:
    `OWN_SPECIALS`): the target language's tag starts every source, and no tag is ever
    produced as output, nor the back-translation tag of a tokenizer that has one, nor the
    byte pieces of control characters (`CONTROL_BYTES`)."""
    pieces = (BACK_TRANSLATION_TAG, *CONTROL_BYTES)
    present = [i for i in (tokenizer.piece_id(piece) for piece in pieces) if i != UNK_ID]
    never = (*OWN_SPECIALS.never, *present)
    if not codes:
        return OWN_SPECIALS if never == OWN_SPECIALS.never else SpecialTokens(never=never)
    tags = {code: tokenizer.piece_id(language_tag(code)) for code in codes}
    return SpecialTokens(never=(*never, *tags.values()), language_tags=tags, source_tag="target")


@dataclass(frozen=True)
class Framing:
    """The ids around the tokens of a training pair in direction d (its number in
    `DataConfig.directions()`):

        source            source_prefixes[d] + x + [eos]
        decoder input     [bos] + target_prefixes[d] + y
        labels            target_prefixes[d] + y + [eos]

    The prefixes are the language tags of a model that has them (`language_prefixes`): the
    same number of them in every direction.
    """

    specials: SpecialTokens = OWN_SPECIALS
    source_prefixes: tuple[tuple[int, ...], ...] = ((),)
    target_prefixes: tuple[tuple[int, ...], ...] = ((),)

    @classmethod
    def of(cls, specials: SpecialTokens, directions: Sequence[tuple[str, str]]) -> Framing:
        """The framing of pairs in `directions` ((source, target) language codes; the first
        is data.src_lang -> data.tgt_lang).

        Raises:
            TmtError: a model with language tags lacks one of them, naming the data key.
        """
        sources, targets = [], []
        for d, (src_lang, tgt_lang) in enumerate(directions):
            try:
                source, target = specials.language_prefixes(src_lang, tgt_lang)
            except SettingError as err:
                where = "" if d == 0 else f" (data.train direction {src_lang}->{tgt_lang})"
                raise TmtError(f"data.{err.setting} {err.value}{where}: {err.reason}") from None
            sources.append(tuple(source))
            targets.append(tuple(target))
        return cls(specials, tuple(sources), tuple(targets))

    @property
    def tags(self) -> int:
        """Language tags on the side that has more of them (positions a pair needs besides
        its tokens and its eos or bos)."""
        return max(len(self.source_prefixes[0]), len(self.target_prefixes[0]))


OWN_FRAMING = Framing()
