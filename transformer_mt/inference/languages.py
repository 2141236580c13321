"""The directions a model translates: which (source, target) language pairs it may be asked
for, and what it does without being asked (`Languages`).

A model with language tags is told the direction by tags (`SpecialTokens.language_prefixes`):
the target's tag in front of the source (OPUS-MT and the models trained here), or the
source's in front of the source and the target's forced first (NLLB). It can be told every
ordered pair of its languages whose tags it has, not only the pairs it was trained on; the
others are zero-shot, the directions multilingual models translate worst (and sometimes into
the wrong language). A model without tags translates the directions of its training data and
nothing else, whatever it is told. A model that tags only the target, trained into a group of
languages that has no tag of its own (an OPUS-MT model into `ROMANCE`, told each member by its
`>>fra<<`), was trained from its source into each language it has a tag for.

A translation that names its target only comes from the default's source, unless the model
does not translate that direction and was trained into the target from one language alone: a
model trained de->en and en->de, asked for de, translates from en (`source_into`).

The server checks each request's languages here (`check`) and lists them at /v1/languages;
`Translator.languages` builds them from the checkpoint, and `Translator.direction` the
`Direction` of each pair asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from transformer_mt.data.specials import SpecialTokens
from transformer_mt.errors import SettingError, TmtError

# (source language, target language); None: not named (a model without tags needs none).
Pair = tuple[str | None, str | None]


@dataclass(frozen=True)
class Direction:
    """The language tags of translations from `src_lang` into `tgt_lang`: the ids in front of
    every source, and those forced in front of every target (`language_prefixes`); none for a
    model without tags."""

    src_lang: str | None
    tgt_lang: str | None
    source_prefix: tuple[int, ...] = ()
    target_prefix: tuple[int, ...] = ()


@dataclass(frozen=True)
class Languages:
    """What a model may be asked to translate.

    `trained`: the directions of its training data it can be told, in the checkpoint's order;
    `zero_shot`: every other ordered pair of its languages it can be told, sorted; `default`:
    the direction of a translation that names none.
    """

    default: Pair
    trained: tuple[Pair, ...] = ()
    zero_shot: tuple[Pair, ...] = ()

    @classmethod
    def of(
        cls,
        specials: SpecialTokens,
        trained: Sequence[Pair] = (),
        src_lang: str | None = None,
        tgt_lang: str | None = None,
    ) -> Languages:
        """The languages of a model with `specials` trained on `trained` (its checkpoint's
        `data.directions()`; none: its default direction only), whose default direction is
        (`src_lang`, `tgt_lang`), each None: the first trained direction's."""
        if specials.language_tags:
            trained = [p for pair in trained for p in _into_tags(specials, *pair)]
        first = trained[0] if trained else (None, None)
        default = (src_lang or first[0], tgt_lang or first[1])
        if not trained:
            trained = (default,)
        if not specials.language_tags:
            return cls(default, tuple(dict.fromkeys(trained)))
        told = tuple(dict.fromkeys(p for p in trained if _can_tell(specials, *p)))
        # The languages it has: its tags and those of its trained directions (a source a
        # model tagging targets only needs no tag). Not the default's, which may be a
        # language asked for (`--src-lang ja`), and would become a zero-shot one.
        named = [*specials.language_tags, *(c for pair in told for c in pair)]
        codes = sorted({c for c in named if c is not None})
        zero_shot = tuple(
            (src, tgt)
            for src in codes
            for tgt in codes
            if (src, tgt) not in told and _can_tell(specials, src, tgt)
        )
        return cls(default, told, zero_shot)

    @property
    def directions(self) -> tuple[Pair, ...]:
        """Every direction the model may be asked for: trained, then zero-shot."""
        return self.trained + self.zero_shot

    @property
    def codes(self) -> tuple[str, ...]:
        """The languages of its directions, sorted."""
        return tuple(sorted({c for pair in self.directions for c in pair if c is not None}))

    def sources(self, tgt_lang: str | None) -> tuple[str, ...]:
        """The languages it may be asked to translate into `tgt_lang` from, sorted."""
        return tuple(sorted({s for s, t in self.directions if t == tgt_lang and s is not None}))

    def source_into(self, tgt_lang: str | None) -> str | None:
        """The source language of a translation into `tgt_lang` that names none: the
        default's, or where the model does not translate from it into `tgt_lang`, that of the
        one trained direction into `tgt_lang` (a model trained de->en and en->de is asked for
        de with English text: de->de is no direction). A target it lacks is left to `check`.

        Raises:
            SettingError: naming tgt_lang: the default's source makes no direction into it,
                and the model was trained into it from several languages, or none: the
                source must be named.
        """
        src_lang = self.default[0]
        offered = self.sources(tgt_lang)
        if src_lang in offered or not offered:
            return src_lang
        trained = {s for s, t in self.trained if t == tgt_lang}
        if len(trained) == 1:
            return trained.pop()
        raise SettingError(
            "tgt_lang",
            tgt_lang,
            f"the model does not translate {src_lang}->{tgt_lang} (its default source); name "
            f"the source language: it translates into {tgt_lang} from {_listed(offered)}",
        )

    def check_default(self, asked: Pair) -> None:
        """`check` of the default direction, made of `asked` (None: not named) and the
        checkpoint's own languages: a source named alone that the model does not translate
        into its own target is blamed as the source, with the targets it has, not as a
        target no one named.

        Raises:
            SettingError: as `check`; naming src_lang for a source asked for alone.
        """
        src_lang, tgt_lang = self.default
        alone = asked[0] is not None and asked[1] is None
        if alone and src_lang in self.codes and self.default not in self.directions:
            targets = sorted({t for s, t in self.directions if s == src_lang and t is not None})
            raise SettingError(
                "src_lang",
                src_lang,
                f"the model does not translate {src_lang}->{tgt_lang} (its default target); "
                f"name the target language: it translates {src_lang} into {_listed(targets)}",
            )
        self.check(src_lang, tgt_lang)

    def check(self, src_lang: str | None, tgt_lang: str | None) -> None:
        """Refuse a direction the model may not be asked for.

        Raises:
            SettingError: naming tgt_lang or src_lang: a language the model does not have (the
                target's first), or one it has, in a direction it does not offer.
        """
        if (src_lang, tgt_lang) in self.directions:
            return
        codes = ", ".join(self.codes)
        for setting, code in (("tgt_lang", tgt_lang), ("src_lang", src_lang)):
            if code not in self.codes:
                problem = "the model needs it" if code is None else "the model has no such language"
                raise SettingError(setting, code, f"{problem}; it knows {codes}")
        offered = _listed([f"{s}->{t}" for s, t in self.directions])
        raise SettingError(
            "tgt_lang",
            tgt_lang,
            f"the model does not translate {src_lang}->{tgt_lang}; it translates {offered}",
        )


def tagged(code: str | None, specials: SpecialTokens) -> str | None:
    """`code` when the model has a language tag for it, else None: a checkpoint's data
    languages are its default direction only where its tags can name them."""
    return code if code in specials.language_tags else None


def asked_direction(
    specials: SpecialTokens, trained: Sequence[Pair], asked: Pair, own: Pair
) -> Pair:
    """The direction a translator of a checkpoint is asked for, `asked` (None: not named):
    each language not named is the checkpoint's own (`own`: data.src_lang, data.tgt_lang)
    where the model has a tag for it (`tagged`), and a source so filled in gives way to
    `Languages.source_into` the target asked for: the rule the server follows per request.

    Raises:
        SettingError: as `Languages.source_into`.
    """
    src_lang = asked[0] or tagged(own[0], specials)
    tgt_lang = asked[1] or tagged(own[1], specials)
    if asked[0] is None and asked[1] is not None:
        languages = Languages.of(specials, trained, src_lang, tgt_lang)
        if languages.default not in languages.directions:
            src_lang = languages.source_into(tgt_lang)
    return src_lang, tgt_lang


def _into_tags(specials: SpecialTokens, src_lang: str | None, tgt_lang: str | None) -> list[Pair]:
    """A trained direction as the model can be told it: itself, or where the target has no
    tag and the source needs none (an OPUS-MT model's `deu` -> `ROMANCE`: it is told the
    member of the group by its tag), the directions from its source into each tag."""
    if tgt_lang in specials.language_tags or specials.source_tag == "source":
        return [(src_lang, tgt_lang)]
    return [(src_lang, tag) for tag in specials.language_tags if tag != src_lang]


LISTED = 12  # directions (or languages) a message names before it counts the rest


def _listed(names: Sequence[str]) -> str:
    """`names` joined, the first `LISTED` and how many more where there are more: an
    NLLB-200 model offers 40,602 directions, which no message should list."""
    shown = ", ".join(names[:LISTED])
    more = len(names) - LISTED
    return shown + (f" and {more:,} more" if more > 0 else "")


def _can_tell(specials: SpecialTokens, src_lang: str | None, tgt_lang: str | None) -> bool:
    """Whether the model has the tags a translation from `src_lang` into `tgt_lang` needs."""
    if src_lang == tgt_lang:
        return False
    try:
        specials.language_prefixes(src_lang, tgt_lang)
    except SettingError:
        return False
    return True


Loaded = TypeVar("Loaded")


def in_direction(load: Callable[[Pair], Loaded], direction: Pair | None, what: str) -> Loaded:
    """`load((None, None))`: a model in its own default direction; a multilingual model with
    none (an import: the tag of its target language is needed, and unknown) is loaded for
    `direction` instead. Any other model keeps its own, so that the caller can name the
    directions it translates when `direction` is not one.

    Raises:
        TmtError: the model has no direction of its own and `direction` is None, naming
            `what` it is (a checkpoint).
    """
    try:
        return load((None, None))
    except SettingError as err:
        if err.setting not in ("src_lang", "tgt_lang"):
            raise
        if direction is None:
            reason = f"has no direction of its own ({err.reason})"
            raise TmtError(f"{what}: {reason}; name the directions to translate") from None
    return load(direction)
