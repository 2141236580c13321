"""Fetch a parallel corpus into data/<corpus>/ as plain text (see docs/data.md).

python scripts/get_data.py multi30k [--out data/multi30k] [--from DIR]
python scripts/get_data.py small_parallel_enja --from ../shared/data/small_parallel_enja
python scripts/get_data.py wmt14                      # the datasets hub, online: 4.5M pairs
python scripts/get_data.py wmt14_standin [--pairs N] [--from DIR]   # offline, from Multi30k
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from transformer_mt.cli.common import Parser, run_command  # noqa: E402
from transformer_mt.data.fetch import CORPORA, fetch_corpus  # noqa: E402
from transformer_mt.data.hub_export import HUB_CORPORA  # noqa: E402
from transformer_mt.data.standin import (  # noqa: E402
    STANDIN,
    STANDIN_PAIRS,
    STANDIN_SOURCES,
    make_standin,
)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", choices=sorted([*CORPORA, *HUB_CORPORA, STANDIN]))
    parser.add_argument("--out", help="output folder (default: data/<corpus>)")
    parser.add_argument(
        "--from",
        dest="mirror",
        metavar="DIR",
        help=f"copy from a local mirror of .gz files; {STANDIN}: the Multi30k folder to make it "
        f"from (default: the first of {', '.join(STANDIN_SOURCES)} that holds it)",
    )
    parser.add_argument(
        "--pairs", type=int, help=f"{STANDIN}: training pairs (default {STANDIN_PAIRS})"
    )
    args = parser.parse_args(argv)
    if args.pairs is not None and args.corpus != STANDIN:
        parser.error(f"--pairs: only for {STANDIN}")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    out = args.out or f"data/{args.corpus}"

    def fetch() -> int:
        if args.corpus == STANDIN:
            sources = [args.mirror] if args.mirror else STANDIN_SOURCES
            paths = make_standin(out, STANDIN_PAIRS if args.pairs is None else args.pairs, sources)
        else:
            paths = fetch_corpus(args.corpus, out, args.mirror)
        print(f"{args.corpus}: {len(paths)} files in {paths[0].parent}")
        return 0

    # As every tmt command: one error line naming the file (exit 2; 1 for a full disk), 130
    # when interrupted.
    return run_command(fetch, own_signals=False, describe=str)


if __name__ == "__main__":
    sys.exit(main())
