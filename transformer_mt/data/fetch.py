"""Fetch a known corpus into plain text files: from its upstream repository or a local mirror.

Output layout, the one `DataConfig(format="text")` reads: `{out}/{split}.{lang}`, UTF-8, one
sentence a line. Every file is checked against the expected line count, written atomically
(temporary name, then rename), and skipped when it is already there with the right count, so
fetching twice is harmless and an interrupted fetch resumes.

Mirrors are laid out like `shared/data/<corpus>/`: `{split}.{lang}.gz` with our split names.
"""

from __future__ import annotations

import gzip
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from transformer_mt.errors import TmtError

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_S = 60


class FetchError(TmtError):
    """A corpus file cannot be downloaded, copied or verified."""


@dataclass(frozen=True)
class CorpusSpec:
    """Where a corpus lives upstream and what a complete copy looks like."""

    url: str  # format string with {name}: the upstream file name
    upstream_names: dict[str, str]  # our split name -> upstream file stem
    gzipped_upstream: bool  # upstream files end in .gz
    langs: tuple[str, ...]
    line_counts: dict[str, int]  # our split name -> lines in every language


CORPORA = {
    "multi30k": CorpusSpec(
        url="https://github.com/multi30k/dataset/raw/master/data/task1/raw/{name}",
        upstream_names={"train": "train", "valid": "val", "test2016": "test_2016_flickr"},
        gzipped_upstream=True,
        langs=("en", "de", "fr", "cs"),
        line_counts={"train": 29000, "valid": 1014, "test2016": 1000},
    ),
    "small_parallel_enja": CorpusSpec(
        url="https://github.com/odashi/small_parallel_enja/raw/master/{name}",
        upstream_names={"train": "train", "valid": "dev", "test": "test"},
        gzipped_upstream=False,
        langs=("en", "ja"),
        line_counts={"train": 50000, "valid": 500, "test": 500},
    ),
}


def fetch_corpus(name: str, out_dir: str | Path, mirror: str | Path | None = None) -> list[Path]:
    """Write every split and language of corpus `name` as plain text under `out_dir`.

    Args:
        name: a key of CORPORA (multi30k, small_parallel_enja).
        out_dir: destination folder, created if needed.
        mirror: a local folder of `{split}.{lang}.gz` files to copy instead of downloading.

    Returns:
        The paths of all files of the corpus (written now or already complete).

    Raises:
        FetchError: unknown corpus, download failure, missing mirror file, wrong line count.
    """
    if name not in CORPORA:
        raise FetchError(f"unknown corpus {name!r}; known: {', '.join(sorted(CORPORA))}")
    spec = CORPORA[name]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, expected in spec.line_counts.items():
        for lang in spec.langs:
            target = out_dir / f"{split}.{lang}"
            paths.append(target)
            if target.exists() and _count_lines(target.read_bytes()) == expected:
                log.info("%s: present, %d lines", target, expected)
                continue
            text = _read_source(spec, split, lang, mirror)
            found = _count_lines(text)
            if found != expected:
                raise FetchError(f"{split}.{lang}: {found} lines, expected {expected}")
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_bytes(text)
            tmp.replace(target)
            log.info("%s: wrote %d lines", target, found)
    return paths


def _read_source(spec: CorpusSpec, split: str, lang: str, mirror: str | Path | None) -> bytes:
    """The decompressed bytes of one file, from the mirror or the upstream URL."""
    if mirror is not None:
        path = Path(mirror) / f"{split}.{lang}.gz"
        try:
            return gzip.decompress(path.read_bytes())
        except FileNotFoundError:
            raise FetchError(f"{path}: not in the mirror") from None
        except (OSError, EOFError) as err:
            raise FetchError(f"{path}: not a readable gzip file ({err})") from None
    upstream = spec.upstream_names[split] + f".{lang}" + (".gz" if spec.gzipped_upstream else "")
    url = spec.url.format(name=upstream)
    log.info("downloading %s", url)
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as err:
        raise FetchError(
            f"{url}: download failed ({err}); fetch from a local mirror of the .gz files instead"
        ) from None
    if spec.gzipped_upstream:
        try:
            return gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise FetchError(f"{url}: not a gzip file ({err})") from None
    return data


def _count_lines(data: bytes) -> int:
    """Lines in `data`, counting a last line without a newline too."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
