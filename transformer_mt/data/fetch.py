"""Fetch a known corpus by name into plain text files: from upstream, a local mirror or (for
hub corpora) the `datasets` hub.

`fetch_corpus` is the one entry point for every name of `CORPORA` and `HUB_CORPORA`: it reads
the files of a `CORPORA` corpus from its upstream URL or a mirror itself, and hands a hub
corpus to `hub_export`. The files are written, checked and kept as corpus_files.py says.

Mirrors are laid out like `shared/data/<corpus>/`: `{split}.{lang}.gz` with our split names.
"""

from __future__ import annotations

import gzip
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from transformer_mt.data.corpus_files import FetchError, already_complete, count_lines
from transformer_mt.data.hub_export import HUB_CORPORA, export_hub_corpus
from transformer_mt.files import atomic_open
from transformer_mt.text_files import open_binary

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_S = 60


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
        name: a key of CORPORA (multi30k, small_parallel_enja) or HUB_CORPORA (wmt14).
        out_dir: destination folder, created if needed.
        mirror: a local folder of `{split}.{lang}.gz` files (or of the plain text files a
            fetch wrote) to copy instead of downloading; not for hub corpora.

    Returns:
        The paths of all files of the corpus (written now or already complete).

    Raises:
        FetchError: unknown corpus, download failure, missing mirror file, wrong line count.
        DataError: the hub dataset cannot be read (offline, say).
    """
    out_dir = Path(out_dir)
    if name in HUB_CORPORA:
        if mirror is not None:
            raise FetchError(f"{name}: comes from the datasets hub; there is no mirror to copy")
        return export_hub_corpus(HUB_CORPORA[name], out_dir)
    if name not in CORPORA:
        known = ", ".join(sorted([*CORPORA, *HUB_CORPORA]))
        raise FetchError(f"unknown corpus {name!r}; known: {known}")
    spec = CORPORA[name]
    if mirror is not None and not Path(mirror).is_dir():
        what = "does not exist" if not Path(mirror).exists() else "is not a folder"
        raise FetchError(f"{mirror}: {what}; a mirror is a folder of {name}'s files")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, expected in spec.line_counts.items():
        for lang in spec.langs:
            target = out_dir / f"{split}.{lang}"
            paths.append(target)
            if already_complete([target], expected):
                continue
            origin = _origin(spec, split, lang, mirror)
            text = _read_source(spec, origin, mirror is not None)
            found = count_lines(text)
            if found != expected:
                raise FetchError(
                    f"{origin}: {found} lines, expected {expected} for {name} {split}.{lang}"
                    + (f" (is {mirror} a mirror of {name}?)" if mirror is not None else "")
                )
            with atomic_open(target, "wb") as f:
                f.write(text)
            log.info("%s: wrote %d lines", target, found)
    return paths


def _origin(spec: CorpusSpec, split: str, lang: str, mirror: str | Path | None) -> str:
    """Where one file comes from: its path in the mirror (gzipped as upstream keeps it, else
    the plain text a fetched copy holds), or its upstream URL."""
    if mirror is not None:
        gzipped = Path(mirror) / f"{split}.{lang}.gz"
        plain = gzipped.with_suffix("")
        return str(plain if plain.is_file() and not gzipped.exists() else gzipped)
    upstream = spec.upstream_names[split] + f".{lang}" + (".gz" if spec.gzipped_upstream else "")
    return spec.url.format(name=upstream)


def _read_source(spec: CorpusSpec, origin: str, mirrored: bool) -> bytes:
    """The decompressed bytes of one file at `origin` (`_origin`): a mirror's path when
    `mirrored`, else a URL."""
    if mirrored:
        path = Path(origin)
        try:
            with open_binary(path) as source:  # a `.gz` decompressed as it is read
                return source.read()
        except FileNotFoundError:
            plain = path.with_suffix("")
            raise FetchError(f"{path}: not in the mirror (nor {plain.name})") from None
        except (OSError, EOFError) as err:
            kind = "gzip file" if path.suffix == ".gz" else "file"
            raise FetchError(f"{path}: not a readable {kind} ({err})") from None
    url = origin
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
