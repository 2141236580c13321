"""Fetch a parallel corpus into data/<corpus>/ as plain text, from a checkout that is not
installed: `tmt data` (transformer_mt/cli/data.py; docs/data.md).

python scripts/get_data.py multi30k [--out data/multi30k] [--from DIR]
python scripts/get_data.py small_parallel_enja --from ../shared/data/small_parallel_enja
python scripts/get_data.py wmt14                      # the datasets hub, online: 4.5M pairs
python scripts/get_data.py wmt14_standin [--pairs N] [--from DIR]   # offline, from Multi30k
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from transformer_mt.cli import main as tmt  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    return tmt(["data", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
