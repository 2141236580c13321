"""A `datasets` hub translation split (`data.format: hub`) as `src`/`tgt` pairs, whole or
streamed.

The hub's translation layout is one `translation` column of texts by language. Online, a fast
connectivity probe runs first, so that an offline machine fails at once with a message rather
than the hub client retrying for minutes; a local dataset folder (`save_to_disk`, or a folder
of data files) needs no network. Failures of the hub client, of many unrelated types, become
one-line `DataError`s naming the split.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc

from transformer_mt.data.readers import DataError, translation_pair
from transformer_mt.errors import one_line

HUB_HOST = "huggingface.co"
HUB_PROBE_TIMEOUT_S = 3.0  # an offline machine answers "no" this fast instead of hanging


def load_hub(
    name: str, config: str | None, split: str, src_lang: str, tgt_lang: str
) -> datasets.Dataset:
    """A hub translation dataset (e.g. wmt14 / de-en), with the same `src`/`tgt` columns.

    Online, a fast connectivity probe runs first so that an offline machine fails at once with a
    message instead of letting the hub client retry for minutes. With HF_HUB_OFFLINE or
    HF_DATASETS_OFFLINE set (before Python starts), `datasets` serves its local cache, or fails
    fast itself. A local dataset folder needs neither.

    The texts are taken from the Arrow table as they are, not copied row by row through Python.

    Raises:
        DataError: as `translation_pair`, naming the dataset, split and first row at fault.
    """
    raw = _open_hub(name, config, split, streaming=False)
    where = _hub_split(name, config, split)
    if "translation" not in raw.column_names:
        raise DataError(f"{where}: no 'translation' column")
    table = raw.data.table  # `load_dataset` gives no index mapping: the rows are the table's
    column, langs = table.column("translation"), (src_lang, tgt_lang)
    texts = _hub_texts(column, langs)
    bad = 0 if texts is None else pc.index(pc.or_(*map(pc.is_null, texts)), True).as_py()
    if 0 <= bad < len(table):  # the row says which text is missing
        translation_pair(table.slice(bad, 1).to_pylist()[0], *langs, _hub_row(where, bad))
    if texts is None:  # no row, or texts of a type `_hub_texts` does not take
        raise DataError(f"{where}: translation holds {column.type}, not texts by language")
    return datasets.Dataset(pa.table({"src": texts[0], "tgt": texts[1]}))


def _hub_texts(column: pa.ChunkedArray, langs: tuple[str, str]) -> list[pa.ChunkedArray] | None:
    """The texts of each language in a hub split's translation column; None unless it is a
    struct holding both as strings (the hub's Translation feature): then every row is at fault,
    and the first says how."""
    kind = column.type
    if not pa.types.is_struct(kind) or any(kind.get_field_index(lang) < 0 for lang in langs):
        return None
    text_types = (pa.types.is_string, pa.types.is_large_string)
    if not all(any(is_text(kind.field(lang).type) for is_text in text_types) for lang in langs):
        return None
    return [pc.struct_field(column, lang) for lang in langs]


def _hub_split(name: str, config: str | None, split: str) -> str:
    """A hub split as messages name it."""
    return f"hub dataset {name}{'' if config is None else f'/{config}'} split {split}"


def _hub_row(where: str, number: int) -> str:
    """Row `number` of hub split `where`, as messages name it: `datasets` numbers from 0."""
    return f"{where}, row {number} (from 0)"


def _open_hub(
    name: str, config: str | None, split: str, streaming: bool
) -> datasets.Dataset | datasets.IterableDataset:
    """`datasets.load_dataset` of one hub split, its failures as one-line DataErrors; the hub
    is probed only for a name that is not a local folder, which `datasets` reads itself."""
    offline = _offline_variable()
    if offline is None and not Path(name).is_dir():
        _probe_hub(name)
    try:
        return datasets.load_dataset(name, config, split=split, streaming=streaming)
    except Exception as err:  # the hub client raises many unrelated types; report them all
        where = f" ({offline} is set: only cached datasets load)" if offline else ""
        raise DataError(f"{_hub_split(name, config, split)}{where}: {one_line(err)}") from None


def stream_hub(
    name: str, config: str | None, split: str, src_lang: str, tgt_lang: str
) -> Iterator[tuple[str, str]]:
    """The pairs of a hub split, streamed; a row at fault is named by its number."""
    raw = _open_hub(name, config, split, streaming=True)
    where = _hub_split(name, config, split)
    for number, row in enumerate(raw):
        if "translation" not in row:
            raise DataError(f"{where}: no 'translation' column")
        yield translation_pair(row, src_lang, tgt_lang, _hub_row(where, number))


def _offline_variable() -> str | None:
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return var
    return None


def _probe_hub(name: str) -> None:
    try:
        socket.create_connection((HUB_HOST, 443), timeout=HUB_PROBE_TIMEOUT_S).close()
    except OSError as err:
        raise DataError(
            f"hub dataset {name}: cannot reach {HUB_HOST} ({one_line(err)}); this machine "
            "looks offline: use data.format text, tsv or jsonl with local files"
        ) from None
