"""Inline markup put back around a unit's translation: each element of a `Unit` (units.py)
around the target words aligned to the source words it held.

The model reads only `Unit.text`, whitespace runs as one space; `render` writes the
translation back with each inline element placed:

    1) span: from the first to the last target word aligned to any of the element's source
       words (a word is a whitespace-separated run of `Unit.text`, or of the translation, and
       in Chinese and Japanese, which have no spaces between words, a character: `units.WORD`)
    2) order: elements keep their source order and nesting, so every tag of the input comes out
       in the same order: siblings never overlap, a child stays inside its parent, and a span
       that would reach back over an element placed before it is cut to the words after it
    3) fallback, for an element none of whose words is aligned to a free target word: it goes
       around the free word after the target words of the source word before it, keeping
       enough free words for the elements after it (order wins over alignment: with `<b>red</b>
       <i>car</i>` translated `voiture rouge`, b gets the first word and i the second); with
       none left it is written around no word (HTML: `<b></b>`), or dropped where empty markup
       would not parse back (Markdown emphasis: `****` is not emphasis)
    4) kept elements (code, `translate="no"`, code spans): the model reads their text, so that
       the sentence stays whole, and the target words aligned to it (the longest run of
       neighbours among them: a stray link to a far word must not delete the words between)
       are replaced by the element exactly as written (only its text, where the words hold it
       as the model read it: `<code>git</code>-Befehl`); with no aligned free word it is written
       as a word of its own
    5) punctuation that an element's target words start or end with, and its source text does
       not, is written outside its markup: `*Schnee*;` translated `snow,` is `*snow*,`; an
       element around part of one word (`x<sup>2</sup>`) goes around that part where the word's
       translation holds its text, and the markup after it in the word around its own
    6) markup without text (an image, a comment, a Markdown inline HTML tag) sticks to the
       word it touches in the source: after the target word aligned to the source word before
       it (or around it), or before the one aligned to the word after it when only that one
       touches it (`<span>` in `see <span>this`); with whitespace on both sides it stays apart;
       inside a word (`hund<wbr>läuft`), after the same text in the word's translation, or
       before the translation where it lacks that text.
       A line break (`<br>`, a Markdown hard break; whitespace to the model, so a sentence
       broken across lines is one unit) stays first or last in its parent if it was so in the
       source, else between two of its parent's target words (the elements before it leave a
       word after it where that leaves them the words they need)

`AlignedText.pairs` link source words to target words; alignment.py makes them from the model's
cross-attention, and tests from a script. Thai, Lao, Khmer and Burmese, also written without
spaces, have one word per run of their letters, so elements around part of one go around all of
it. Nothing here recurses over the
nesting of the markup (a document may nest thousands of elements in a few kilobytes): elements
are placed and written in loops over a flat list (`_Node`).
"""

from __future__ import annotations

import bisect
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from transformer_mt.documents.units import WORD, AlignedText, Inline, Kept, Span, Unit


def render(unit: Unit, translation: AlignedText, escape: Callable[[str], str]) -> str:
    """The translation with the unit's inline markup placed (see the module docstring); each
    target word is written through `escape` (the format's own), whitespace as translated."""
    return _Placement(unit, translation, escape).write()


@dataclass
class _Node:
    """One inline element of a unit, in a flat list in source order (parents first), so that
    placing and writing walk a loop, not the call stack: a document may nest thousands deep."""

    inline: Inline
    parent: int  # the index of its parent, -1 at the top
    previous: int  # the index of the sibling before it, -1 for the first
    position: int  # its place among its siblings
    children: list[int] = field(default_factory=list)
    sources: range = range(0)  # the source words it holds
    need: int = 0  # target words it takes at least (`_Placement._need`)
    later: int = 0  # what the siblings after it need
    breaks: int = 0  # line breaks among the siblings after it that want a word after them
    start: int = 0  # placed: target words [start, end); start == end: between two words
    end: int = 0
    absorbed: bool = False  # written by the kept element before it (`_kept_text`)
    within: str | None = None  # markup without text inside a word: the word's text before it


# What `_Placement.write` writes next: literal text, target words, or an element.
_Task = str | range | int


class _Placement:
    def __init__(self, unit: Unit, translation: AlignedText, escape: Callable[[str], str]):
        self.unit, self.escape = unit, escape
        matches = list(WORD.finditer(translation.text))
        self.words = [m.group() for m in matches]
        # The whitespace in front of each target word, as translated ("" for the first).
        ends = [0, *(m.end() for m in matches)]
        self.gaps = [
            translation.text[ends[i] : m.start()] if i else "" for i, m in enumerate(matches)
        ]
        self.written: set[int] = set()  # target words whose whitespace is written
        self.fronts: dict[int, str] = {}  # target word: its front written before markup in it
        self.targets: dict[int, set[int]] = {}
        for source, target in translation.pairs:
            self.targets.setdefault(source, set()).add(target)
        self.nodes, self.top = _flatten(unit.inlines)
        self._measure()

    def write(self) -> str:
        """1) place every element, parents before children; 2) write the words and elements in
        target order, from a stack of what comes next."""
        for index in range(len(self.nodes)):
            self._place(index)
        parts: list[str] = []
        todo = self._sequence(self.top, 0, len(self.words))[::-1]
        while todo:
            task = todo.pop()
            if isinstance(task, str):
                parts.append(task)
            elif isinstance(task, range):
                parts.append(self._words(task.start, task.stop))
            else:
                text, inside = self._enter(self.nodes[task])
                parts.append(text)
                todo += inside[::-1]
        return "".join(parts)

    # --- placement -----------------------------------------------------------------------

    def _measure(self) -> None:
        """Each element's source words, its need, and what the siblings after it need and how
        many of them are line breaks that want a word after them (`_wants_a_word_after`)."""
        starts = [s for s, _ in self.unit.words]
        ends = [e for _, e in self.unit.words]
        for node in self.nodes:
            first = bisect.bisect_right(ends, node.inline.start)  # the first ending after it
            last = bisect.bisect_left(starts, node.inline.end)
            # markup without text holds no word, not even one it sits inside (`hund<wbr>läuft`)
            empty = node.inline.start == node.inline.end
            node.sources = range(first, first if empty else max(first, last))
        for node in reversed(self.nodes):  # children after their parent: theirs come first
            node.need = self._need(node)
        for siblings in [self.top, *(node.children for node in self.nodes)]:
            later = breaks = 0
            for index in reversed(siblings):
                sibling = self.nodes[index]
                sibling.later, sibling.breaks = later, breaks
                later += sibling.need
                breaks += self._wants_a_word_after(sibling)

    def _need(self, node: _Node) -> int:
        """Target words an element takes at least: a kept one or one without text none, a
        span one, or what its children take."""
        if isinstance(node.inline, Kept) or not node.sources:
            return 0
        return max(1, sum(self.nodes[child].need for child in node.children))

    def _wants_a_word_after(self, node: _Node) -> bool:
        """Whether `node` is a line break that was not last in its parent in the source: the
        siblings before it leave a word after it where they can (`_place`), so that `_between`
        finds one. An emphasis before it that took the last words had pushed it after them,
        where it ended the paragraph."""
        inline = node.inline
        return (
            isinstance(inline, Kept)
            and inline.line_break
            and inline.end < self._text_end(node.parent)
        )

    def _place(self, index: int) -> None:
        """Target words of one element, within its parent's and after its previous sibling's,
        leaving enough for the siblings after it."""
        node = self.nodes[index]
        lo, hi = self._inside(node.parent)
        cursor = self.nodes[node.previous].end if node.previous >= 0 else lo
        limit = max(cursor, hi - node.later)
        # a word after each line break after it, where that leaves it the words it needs
        limit = min(limit, max(cursor + node.need, limit - node.breaks))
        node.start, node.end = self._span(node, cursor, limit)
        if isinstance(node.inline, Kept) and node.inline.line_break and node.start == node.end:
            node.start = node.end = self._between(node, cursor, limit, lo, hi)

    def _inside(self, parent: int) -> tuple[int, int]:
        if parent < 0:
            return 0, len(self.words)
        return self.nodes[parent].start, self.nodes[parent].end

    def _span(self, node: _Node, cursor: int, limit: int) -> tuple[int, int]:
        """Target words [start, end) of one element, within the free words [cursor, limit)."""
        inline = node.inline
        hits = [t for s in node.sources for t in self.targets.get(s, ()) if cursor <= t < limit]
        if hits and isinstance(inline, Kept):
            return _longest_run(sorted(set(hits)))
        if hits:
            start = min(hits)
            return start, max(max(hits) + 1, min(limit, start + node.need))
        if isinstance(inline, Kept) and inline.start == inline.end and not inline.line_break:
            inside = self._within_word(node, cursor, limit)
            if inside is not None:
                return inside, inside
        # The fallback: where the words around it went; a span takes the free words there.
        after = isinstance(inline, Kept) and inline.attach == "next" and not node.sources
        anchor = self._anchor(inline.start, after)
        width = min(node.need, limit - cursor)
        start = min(max(anchor, cursor), limit - width)
        return start, start + width

    def _within_word(self, node: _Node, cursor: int, limit: int) -> int | None:
        """Where markup without text inside a source word goes (`Wort<img><code>code</code>`,
        `hund<wbr>läuft`, `mehr[^1].`): to the first target word aligned to that word, written
        after the word's source text before it where the target word starts with that text
        (`_enter`); markup between a word and its closing punctuation, before the target
        word's closing punctuation (`more[^1].`); else before the word. After the word, as
        `_anchor` would put it, it took the word from a kept element after it in the same word,
        which then wrote its text a second time."""
        position = node.inline.start
        index = bisect.bisect_right(self.unit.words, position, key=lambda w: w[0]) - 1
        if index < 0 or not self.targets.get(index):
            return None
        first, last = self.unit.words[index]
        target = min(self.targets[index])
        if not first < position < last or not cursor <= target <= limit:
            return None
        before, word = self.unit.text[first:position], self.words[target]
        node.within = before if word.startswith(before) else ""
        if all(map(is_punctuation, self.unit.text[position:last])):
            node.within = word[: len(word) - _closing_punctuation(word)] or node.within
        return target

    def _between(self, node: _Node, cursor: int, limit: int, lo: int, hi: int) -> int:
        """Where a line break goes: first or last in its parent if it was in the source, else
        where `_span` put it, moved between two of its parent's words where there are two (a
        break after the last word would end a Markdown paragraph, or cut an emphasis from its
        closing delimiter; before the first, start an empty line)."""
        if node.inline.start <= self._text_start(node.parent):
            return cursor
        if node.inline.end >= self._text_end(node.parent):
            return limit
        low, high = max(cursor, lo + 1), min(limit, hi - 1)
        return min(max(node.start, low), high) if low <= high else node.start

    def _text_start(self, parent: int) -> int:
        return self.nodes[parent].inline.start if parent >= 0 else 0

    def _text_end(self, parent: int) -> int:
        return self.nodes[parent].inline.end if parent >= 0 else len(self.unit.text)

    def _anchor(self, position: int, after: bool) -> int:
        """Where markup without text at character `position` goes: after the target words of
        the nearest aligned source word before it (or around it), else before those of the
        first aligned one after it; `after`: the other way round. A lookup among the aligned
        source words, not a walk over every word: a unit may hold thousands of images."""
        aligned = self._aligned_words
        split = bisect.bisect_left(aligned, position, key=lambda i: self.unit.words[i][0])
        before = [max(self.targets[aligned[split - 1]]) + 1] if split > 0 else []
        later = [min(self.targets[aligned[split]])] if split < len(aligned) else []
        candidates = [*later, *before] if after else [*before, *later]
        return candidates[0] if candidates else 0

    @cached_property
    def _aligned_words(self) -> list[int]:
        """The source words aligned to some target word, in order."""
        return [i for i in range(len(self.unit.words)) if self.targets.get(i)]

    # --- writing -------------------------------------------------------------------------

    def _sequence(self, children: list[int], lo: int, hi: int) -> list[_Task]:
        """What writes target words [lo, hi) and the elements placed among them, in order."""
        tasks: list[_Task] = []
        position = lo
        for index in children:
            tasks += [range(position, self.nodes[index].start), index]
            position = self.nodes[index].end
        tasks.append(range(position, hi))
        return tasks

    def _enter(self, node: _Node) -> tuple[str, list[_Task]]:
        """What an element writes before its inside, and what writes its inside and the rest
        of it; the side effects (whitespace written, punctuation taken off words) happen in
        writing order, the order of a recursive walk."""
        inline = node.inline
        if node.absorbed:  # its markup is written; any words the fallback gave it are not its
            return "", self._sequence(node.children, node.start, node.end)
        if node.start < node.end:
            gap = self._gap(node.start)  # before the words inside write theirs
            lead, trail = self._punctuation_outside(inline, node.start, node.end - 1)
            if isinstance(inline, Kept):
                return gap + lead + self._kept_text(node) + trail, []
            part = self._part_of_word(node)
            if part is not None:  # `x<sup>2</sup>`: around its part of the word only
                before, text, after = part
                around = self.escape(before) + inline.open + self.escape(text) + inline.close
                return gap + lead + around + self._and_followers(node, after) + trail, []
            inside = self._sequence(node.children, node.start, node.end)
            return gap + lead + inline.open, [*inside, inline.close + trail]
        if isinstance(inline, Span):
            inside = self._sequence(node.children, node.start, node.start)
            return (inline.open, [*inside, inline.close]) if inline.may_be_empty else ("", inside)
        if inline.start < inline.end or inline.attach == "apart":  # a word of its own
            return self._apart(node), []
        if node.within is not None:
            front = self._front(node.start, node.within)
            return self._gap(node.start) + front + inline.source, []
        if inline.attach == "next":
            return self._gap(node.start) + inline.source, []
        if inline.line_break:
            self.written.add(node.start)  # it stands for the whitespace after it
        return inline.source, []

    def _apart(self, node: _Node) -> str:
        """A kept element written as a word of its own, before target word `node.start`: a
        space before it; after it instead where the whitespace in front of that word is
        written (first in its unit, or first inside a span whose opening followed that
        whitespace). A space before it there had come after the opening (`** `x`y**`: no
        longer strong emphasis) and the next word had none."""
        source = node.inline.source
        if node.start in self.written or node.start == 0:
            return source + (" " if node.start < len(self.words) else "")
        return " " + source

    def _part_of_word(self, node: _Node) -> tuple[str, str, str] | None:
        """(before, its text, after) in its one target word, for an element without children
        that holds part of one source word (`x<sup>2</sup>`, `H<sub>2</sub>O`) when that word's
        translation holds the element's text as the model read it; else None (the element
        goes around whole words)."""
        if node.children or node.end != node.start + 1 or len(node.sources) != 1:
            return None
        first, last = self.unit.words[node.sources[0]]
        raw = self.unit.text[node.inline.start : node.inline.end]
        text = raw.strip()
        start = node.inline.start + len(raw) - len(raw.lstrip())
        if not text or (start <= first and last <= start + len(text)):
            return None  # it holds the whole word
        word = self.words[node.start]
        at = word.find(text)
        if at < 0 or len(text) == len(word):
            return None
        return word[:at], text, word[at + len(text) :]

    def _kept_text(self, node: _Node) -> str:
        """What a kept element writes in place of its target words: itself as written; where
        the words hold its text as the model read it (`git` in `git-Befehl`), in place of that
        text only, the rest kept (`_and_followers`). Without this a word that holds a kept
        element and other text lost the other text."""
        words = [self.words[node.start]]
        for i in range(node.start + 1, node.end):
            words.append(self.gaps[i] + self.words[i])
            self.written.add(i)
        text = "".join(words)
        seen = self._read(node.inline)
        at = text.find(seen) if seen else -1
        if at < 0:
            return node.inline.source
        rest = text[at + len(seen) :]
        return self.escape(text[:at]) + node.inline.source + self._and_followers(node, rest)

    def _and_followers(self, node: _Node, rest: str) -> str:
        """`rest`, what follows `node` in its target word, with the siblings right after it
        whose source words are all its (`_followers`) written around their text where `rest`
        holds it (`<kbd>Strg</kbd>+<kbd>C</kbd>`, `<b>f</b><code>x</code>`): kept ones as
        written, the others around their text. Those are `absorbed`: placed around no word,
        or around one the fallback gave them, they would write their text a second time."""
        parts = []
        for other in self._followers(node):
            inline = other.inline
            seen = self._read(inline)
            at = rest.find(seen) if seen else -1
            if at < 0:
                break
            if isinstance(inline, Kept):
                written = inline.source
            else:
                written = inline.open + self.escape(seen) + inline.close
            parts += [self.escape(rest[:at]), written]
            rest = rest[at + len(seen) :]
            other.absorbed = True
        return "".join(parts) + (self.escape(rest) if rest else "")

    def _followers(self, node: _Node) -> list[_Node]:
        """The siblings right after `node` whose source words are all its: kept ones placed
        around no word, and elements without children."""
        siblings = self.nodes[node.parent].children if node.parent >= 0 else self.top
        found = []
        for position in range(node.position + 1, len(siblings)):
            other = self.nodes[siblings[position]]
            words = other.sources
            if not words or words.start < node.sources.start or words.stop > node.sources.stop:
                break  # it holds a word that is not `node`'s
            kept = isinstance(other.inline, Kept)
            if (kept and other.start != other.end) or (not kept and other.children):
                break  # kept and placed around words of its own, or a span with children
            found.append(other)
        return found

    def _front(self, target: int, text: str) -> str:
        """The part of `text`, the front of target word `target`, that markup inside the word
        before this one has not written; taken off the word. "" where the word no longer starts
        with it (punctuation written outside an element took part of it)."""
        done = self.fronts.get(target, "")
        piece = text[len(done) :]
        if not text.startswith(done) or not self.words[target].startswith(piece):
            return ""
        self.words[target] = self.words[target][len(piece) :]
        self.fronts[target] = text
        return self.escape(piece)

    def _read(self, inline: Inline) -> str:
        """An element's text as the model read it, without the whitespace around it."""
        return self.unit.text[inline.start : inline.end].strip()

    def _punctuation_outside(self, inline: Inline, first: int, last: int) -> tuple[str, str]:
        """Punctuation that an element's target words start or end with and its source text
        does not, taken off those words to be written outside its markup: `*snow*,` for
        `*Schnee*;` translated `snow,` (never a whole word)."""
        text = self._read(inline)
        lead = trail = ""
        word = self.words[last]
        if text and not is_punctuation(text[-1]) and not all(map(is_punctuation, word)):
            cut = len(word) - _closing_punctuation(word)
            self.words[last], trail = word[:cut], word[cut:]
        word = self.words[first]
        if text and not is_punctuation(text[0]) and not all(map(is_punctuation, word)):
            cut = 0
            while is_punctuation(word[cut]):
                cut += 1
            lead, self.words[first] = word[:cut], word[cut:]
        return self.escape(lead) if lead else "", self.escape(trail) if trail else ""

    def _words(self, start: int, end: int) -> str:
        return "".join(self._gap(i) + self.escape(self.words[i]) for i in range(start, end))

    def _gap(self, i: int) -> str:
        """The whitespace in front of target word i, the first time it is written."""
        if i in self.written or i >= len(self.words):
            return ""
        self.written.add(i)
        return self.gaps[i]


def is_punctuation(char: str) -> bool:
    """Unicode punctuation (P*): what rule 5 moves out of markup."""
    return unicodedata.category(char).startswith("P")


def _closing_punctuation(word: str) -> int:
    """How many characters of punctuation `word` ends with."""
    count = 0
    while count < len(word) and is_punctuation(word[-1 - count]):
        count += 1
    return count


def _longest_run(words: list[int]) -> tuple[int, int]:
    """[start, end) of the first longest run of consecutive numbers in sorted `words`."""
    best = run = (words[0], words[0] + 1)
    for word in words[1:]:
        run = (run[0], word + 1) if word == run[1] else (word, word + 1)
        if run[1] - run[0] > best[1] - best[0]:
            best = run
    return best


def _flatten(inlines: Sequence[Inline]) -> tuple[list[_Node], list[int]]:
    """Every element of `inlines`, at any depth, parents before their children and siblings
    in source order; and the indices of the top ones."""
    nodes: list[_Node] = []
    top: list[int] = []
    todo = [(inline, -1) for inline in inlines[::-1]]
    while todo:
        inline, parent = todo.pop()
        siblings = nodes[parent].children if parent >= 0 else top
        nodes.append(_Node(inline, parent, siblings[-1] if siblings else -1, len(siblings)))
        siblings.append(len(nodes) - 1)
        if isinstance(inline, Span):
            todo += [(child, len(nodes) - 1) for child in inline.children[::-1]]
    return nodes, top
