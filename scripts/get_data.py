"""Fetch a parallel corpus into data/<corpus>/ as plain text (see docs/data.md).

python scripts/get_data.py multi30k [--out data/multi30k] [--from DIR]
python scripts/get_data.py small_parallel_enja --from ../shared/data/small_parallel_enja
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from transformer_mt.data.fetch import CORPORA, fetch_corpus  # noqa: E402
from transformer_mt.errors import TmtError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", choices=sorted(CORPORA))
    parser.add_argument("--out", help="output folder (default: data/<corpus>)")
    parser.add_argument(
        "--from", dest="mirror", metavar="DIR", help="copy from a local mirror of .gz files"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        paths = fetch_corpus(args.corpus, args.out or f"data/{args.corpus}", args.mirror)
    except TmtError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.corpus}: {len(paths)} files in {paths[0].parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
