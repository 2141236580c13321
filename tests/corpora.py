"""Real text for the tests: a Multi30k slice shipped with them, the full corpora where present.

The slice (tests/fixtures/multi30k, see its README) lets every behaviour be tested from a plain
clone. A few checks need a whole corpus (its exact line counts, a model trained on thousands of
pairs); they read `../shared/data`, the mirror laid out as `tmt data --from` expects,
and skip, saying so, where the repository has none beside it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MULTI30K_SLICE = REPO / "tests" / "fixtures" / "multi30k"
SHARED_DATA = REPO.parent / "shared" / "data"


def slice_lines(split: str, lang: str) -> list[str]:
    """The lines of one file of the shipped slice, e.g. `slice_lines("valid", "de")`."""
    return (MULTI30K_SLICE / f"{split}.{lang}").read_text("utf-8").splitlines()


def shared_corpus(name: str) -> Path:
    """The full corpus `name` under ../shared/data; skips the calling test where it is absent."""
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(f"needs the full {name} corpus: no mirror at {path}")
    return path
