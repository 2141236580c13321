"""Local corpus files read line by line: two line-aligned text files, TSV and JSONL, whole
(`read_text_pair`, `read_tsv`, `read_jsonl`) or lazily (`stream_lines`, `stream_text_pair`, a
line parsed by `tsv_pairs` or `jsonl_pair`).

Read and checked here rather than by `datasets`' own loaders, so that every bad input
(missing, empty, not UTF-8, unequal line counts, malformed line) is a one-line `DataError`
naming the file and, where it applies, the line; `dataset` puts these readers behind the
config's corpus locations.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import datasets

from transformer_mt.data.locations import DataError
from transformer_mt.errors import TmtError
from transformer_mt.text_files import iter_lines, read_lines

log = logging.getLogger(__name__)


def read_text_pair(src_path: str | Path, tgt_path: str | Path) -> datasets.Dataset:
    """Two line-aligned plain-text files (one sentence a line) as a `src`/`tgt` Dataset."""
    src = _corpus_lines(src_path)
    tgt = _corpus_lines(tgt_path)
    if len(src) != len(tgt):
        longer, lines = (src_path, src) if len(src) > len(tgt) else (tgt_path, tgt)
        extra = len(lines) - min(len(src), len(tgt))
        blank = not any(line.strip() for line in lines[-extra:])
        raise DataError(
            f"line counts differ: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
            + (f" ({longer} ends in {extra} blank line(s) the other lacks)" if blank else "")
        )
    return datasets.Dataset.from_dict({"src": src, "tgt": tgt})


def read_tsv(path: str | Path) -> datasets.Dataset:
    """One `source<TAB>target` pair a line; a blank line is an empty pair (`tsv_pairs`)."""
    lines = enumerate(_corpus_lines(path), start=1)
    pairs = list(tsv_pairs(((n, line) for n, line in lines), path))
    return datasets.Dataset.from_dict({"src": [s for s, _ in pairs], "tgt": [t for _, t in pairs]})


# The TSV files this process has warned of CSV quoting in: one warning a file, however often
# it is read (the tokenizer's sample, the encoded corpus, a resumed epoch).
_CSV_WARNED: set[str] = set()


def tsv_pairs(lines: Iterable[tuple[int, str]], path: str | Path) -> Iterator[tuple[str, str]]:
    """(source, target) of each (number, line) of the TSV file `path`, lazily, with one
    warning at the first field quoted as a CSV writer quotes it (`csv_quoted`). A blank line
    is an empty pair, as a blank line of two text files is: training drops it as empty, and
    pair numbers stay line numbers (a trailing blank line had stopped training as a line of
    one field)."""
    warned = str(path) in _CSV_WARNED  # a training run reads its corpus more than once
    for number, line in lines:
        pair = tsv_pair(line, path, number) if line.strip() else ("", "")
        if not warned and any(map(csv_quoted, pair)):
            warned = True
            _CSV_WARNED.add(str(path))
            log.warning(
                "%s:%d: a field in quotes with doubled quotes inside, as a CSV writer quotes "
                "it (pandas' to_csv, Python's csv): TSV fields are read as they stand, so the "
                "model would learn the quotes; write the file without quoting "
                "(quoting=csv.QUOTE_NONE)",
                path,
                number,
            )
        yield pair


def csv_quoted(field: str) -> bool:
    """Whether `field` is quoted as a CSV writer quotes a field holding a quote: wrapped in
    quotes, each quote inside doubled ("Er sagte ""Hallo"".")."""
    inner = field[1:-1]
    return len(field) > 2 and field[0] == field[-1] == '"' and '""' in inner


def read_jsonl(path: str | Path, src_lang: str, tgt_lang: str) -> datasets.Dataset:
    """JSON lines in the hub's translation layout: {"translation": {"de": ..., "en": ...}}."""
    lines = enumerate(_corpus_lines(path), start=1)
    pairs = [jsonl_pair(line, path, n, src_lang, tgt_lang) for n, line in lines if line.strip()]
    if not pairs:
        raise DataError(f"{path}: file is empty")
    return datasets.Dataset.from_dict({"src": [s for s, _ in pairs], "tgt": [t for _, t in pairs]})


def tsv_pair(line: str, path: str | Path, number: int) -> tuple[str, str]:
    """(source, target) of TSV line `number` of `path`."""
    fields = line.split("\t")
    if len(fields) != 2:
        raise DataError(f"{path}:{number}: expected 2 tab-separated fields, found {len(fields)}")
    return fields[0], fields[1]


def jsonl_pair(
    line: str, path: str | Path, number: int, src_lang: str, tgt_lang: str
) -> tuple[str, str]:
    """(source, target) of the non-blank JSONL line `number` of `path`.

    Raises:
        DataError: the line is not JSON, or not {"translation": {src_lang: text, tgt_lang:
            text}}, saying what it holds instead, or an object of it holds a key twice, or a
            text holds an escaped lone surrogate.
    """
    try:
        row = json.loads(line, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{number}: not valid JSON ({err.msg})") from None
    except _RepeatedKey as err:
        raise DataError(f"{path}:{number}: key {err.key!r} appears twice in one object") from None
    except RecursionError:
        raise DataError(f"{path}:{number}: not valid JSON (nested too deeply)") from None
    texts = translation_pair(row, src_lang, tgt_lang, f"{path}:{number}")
    for lang, text in zip((src_lang, tgt_lang), texts, strict=True):
        _refuse_surrogate(text, f"{path}:{number}: translation.{lang}")
    return texts


class _RepeatedKey(Exception):
    """A JSON object holds `key` twice (`_unique_keys`)."""

    def __init__(self, key: str):
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object as a dict, refused where it holds a key twice: `json` keeps the last
    value, so that a line with a second, partial "translation" would be blamed for a
    language it does hold.

    Raises:
        _RepeatedKey: the first key held twice.
    """
    row: dict[str, object] = {}
    for key, value in pairs:
        if key in row:
            raise _RepeatedKey(key)
        row[key] = value
    return row


def translation_pair(row: object, src_lang: str, tgt_lang: str, where: str) -> tuple[str, str]:
    """(source, target) of a row in the hub's translation layout, as a JSONL line or a hub
    dataset holds it: {"translation": {src_lang: text, tgt_lang: text}}.

    Args:
        where: the row, as messages name it (`FILE:LINE`, a hub split's row).

    Raises:
        DataError: `where`, then what the row holds instead.
    """
    pair = row.get("translation") if isinstance(row, dict) else None
    texts = [pair.get(lang) for lang in (src_lang, tgt_lang)] if isinstance(pair, dict) else []
    if len(texts) == 2 and all(isinstance(text, str) for text in texts):
        return texts[0], texts[1]
    if not isinstance(row, dict):
        problem = f"the line is {_json_kind(row)}, not an object"
    elif "translation" not in row:
        problem = "it has no translation"
    elif not isinstance(pair, dict):
        problem = f"translation is {_json_kind(pair)}, not an object"
    else:
        lang = next(lang for lang in (src_lang, tgt_lang) if not isinstance(pair.get(lang), str))
        held = "missing" if lang not in pair else f"{_json_kind(pair[lang])}, not a string"
        problem = f"translation.{lang} is {held}"
    raise DataError(
        f'{where}: expected {{"translation": {{"{src_lang}": ..., "{tgt_lang}": ...}}}} ({problem})'
    )


def _refuse_surrogate(text: str, where: str) -> None:
    """Refuse a text holding half of a UTF-16 pair: a JSON escape may write one ("\\ud800"),
    valid JSON but no character, which Arrow and the tokenizer cannot encode as UTF-8.

    Raises:
        DataError: `where`, then the surrogate.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        surrogate = f"\\u{ord(text[err.start]):04x}"
        raise DataError(
            f"{where} holds {surrogate}, half of a UTF-16 surrogate pair: not a character"
        ) from None


def _json_kind(value: object) -> str:
    """What a JSON value is, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    kinds = {dict: "an object", list: "a list", str: "a string"}
    return kinds.get(type(value), "a number")


def stream_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(number, text) of each line of a UTF-8 file (`.gz` decompressed), read lazily."""
    try:
        yield from enumerate(iter_lines(path), start=1)
    except TmtError as err:
        raise DataError(str(err)) from None


def stream_text_pair(src_path: Path, tgt_path: Path) -> Iterator[tuple[str, str]]:
    counts = [0, 0]
    for src, tgt in itertools.zip_longest(stream_lines(src_path), stream_lines(tgt_path)):
        if src is None or tgt is None:
            counts[src is None] += 1  # only one file goes on: count its lines for the message
            continue
        counts = [src[0], tgt[0]]
        yield src[1], tgt[1]
    if counts[0] != counts[1]:
        raise DataError(
            f"line counts differ: {src_path} has {counts[0]} lines, {tgt_path} has {counts[1]}"
        )


def _corpus_lines(path: str | Path) -> list[str]:
    """`text_files.read_lines` of a corpus file, which must hold some text.

    Raises:
        DataError: the file is missing, empty, or not UTF-8 (with the line number).
    """
    try:
        lines = read_lines(path)
    except TmtError as err:
        raise DataError(str(err)) from None
    if not any(line.strip() for line in lines):
        raise DataError(f"{path}: file is empty")
    return lines
