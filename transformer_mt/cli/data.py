"""`tmt data`: a known parallel corpus as plain text in data/<corpus>/ (docs/data.md).

A command rather than a script of the checkout, so that an installed package fetches them too
(scripts/get_data.py runs this command from a checkout that is not installed).
"""

from __future__ import annotations

import argparse
import logging
import sys

from transformer_mt.data.fetch import CORPORA
from transformer_mt.data.hub_export import HUB_CORPORA
from transformer_mt.data.standin import STANDIN, STANDIN_PAIRS, STANDIN_SOURCES


def add_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data",
        help="fetch a known corpus as plain text: downloaded, copied from a mirror, or from "
        "the datasets hub",
    )
    p.add_argument("corpus", choices=sorted([*CORPORA, *HUB_CORPORA, STANDIN]))
    p.add_argument("--out", "--output", help="output folder (default: data/<corpus>)")
    p.add_argument(
        "--from",
        dest="mirror",
        metavar="DIR",
        help=f"copy from a local mirror (its .gz files, or a fetched copy's plain text); "
        f"{STANDIN}: the Multi30k folder to make it from (default: the first of "
        f"{', '.join(STANDIN_SOURCES)} that holds it)",
    )
    p.add_argument("--pairs", type=int, help=f"{STANDIN}: training pairs (default {STANDIN_PAIRS})")
    p.set_defaults(handler=_run_data)


def _run_data(args: argparse.Namespace) -> int:
    from transformer_mt.data.fetch import fetch_corpus
    from transformer_mt.data.standin import make_standin

    if args.pairs is not None and args.corpus != STANDIN:
        args.command_parser.error(f"--pairs: only for {STANDIN}")
    # What is fetched, file by file, and the download's progress.
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    out = args.out or f"data/{args.corpus}"
    if args.corpus == STANDIN:
        sources = [args.mirror] if args.mirror else STANDIN_SOURCES
        paths = make_standin(out, STANDIN_PAIRS if args.pairs is None else args.pairs, sources)
    else:
        paths = fetch_corpus(args.corpus, out, args.mirror)
    print(f"{args.corpus}: {len(paths)} files in {paths[0].parent}")
    return 0
