"""`tmt serve`: a checkpoint's engine behind the HTTP server. The flags of the engine's limits
and of the server's connection and request limits are generated from the dataclass fields
they set (serve.engine.ServeLimits, serve.http_settings.HttpSettings): the tables below hold
their help, keyed by field name; an unset flag leaves the dataclass's default in force."""

from __future__ import annotations

import argparse
import sys
import typing

from transformer_mt.cli.common import (
    add_device_flags,
    add_language_flags,
    device_of,
    set_cpu_threads,
)
from transformer_mt.cli.flags import FieldFlag, add_field_flags, given_fields, late_field_type
from transformer_mt.errors import TmtError
from transformer_mt.serve.http_settings import HttpSettings

# The engine's limits (ServeLimits fields).
ENGINE_LIMITS = {
    "max_batch_tokens": FieldFlag("tokens decoded together in one step"),
    "max_queue": FieldFlag("sentences waiting for admission before 429"),
    "kv_blocks": FieldFlag("blocks of the paged decoding cache"),
    "block_size": FieldFlag("tokens per cache block"),
    "cache_entries": FieldFlag("entries of each cache (translation, encoder, prefix)"),
}

# Who may connect and how many, and the API keys and limits (serve/quotas.py) of /v1 and the
# LibreTranslate endpoints alike (HttpSettings fields).
HTTP_LIMITS = {
    "allowed_hosts": FieldFlag(
        "Host names answered besides the listening address (*: any)", metavar="NAME"
    ),
    "cors_origins": FieldFlag(
        "origins whose web pages may call the API, e.g. https://app.example (*: any)",
        metavar="ORIGIN",
    ),
    "max_connections": FieldFlag("connections open at once"),
    "max_client_connections": FieldFlag("connections open at once from one address"),
    "api_keys": FieldFlag(
        "require a key of FILE ('KEY REQUESTS/MIN CHARACTERS/MIN' lines, - for no limit); "
        "read again when it changes or on SIGHUP",
        metavar="FILE",
    ),
    "req_limit": FieldFlag(
        "requests per minute from one client address (a request of n texts counts n)",
        metavar="N",
    ),
    "char_limit": FieldFlag("characters per request, its texts together", metavar="N"),
}


def _serve_limits() -> type:
    """ServeLimits, whose module imports torch: its flags take their types when given."""
    from transformer_mt.serve.engine import ServeLimits

    return ServeLimits


def add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="translate over HTTP: JSON API, streaming, metrics and a web page"
    )
    p.add_argument("--checkpoint", required=True, help="e.g. runs/X/checkpoints/best.pt")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: all)",
    )
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    add_device_flags(p)
    p.add_argument(
        "--shortlist",
        metavar="FILE",
        help="vocabulary map from `tmt shortlist`: each sentence scores only its listed "
        "target pieces, as with tmt translate --shortlist",
    )
    add_language_flags(p)
    late = {name: late_field_type(_serve_limits, name) for name in ENGINE_LIMITS}
    add_field_flags(p, ENGINE_LIMITS, late)
    add_field_flags(p, HTTP_LIMITS, typing.get_type_hints(HttpSettings))
    # The server drains on SIGINT / SIGTERM and reads its keys again on SIGHUP (serve/server.py).
    p.set_defaults(handler=_run_serve, own_signals=True)


def _run_serve(args: argparse.Namespace) -> int:
    from transformer_mt.serve import missing_dependencies

    if missing_dependencies():
        raise TmtError("tmt serve needs the serve extra: pip install 'transformer_mt[serve]'")
    http = HttpSettings(**given_fields(args, HTTP_LIMITS))
    from transformer_mt.serve.engine import ServeLimits
    from transformer_mt.serve.http.keys import ApiKeys
    from transformer_mt.serve.server import listen, serve, socket_url

    # Every flag checked, and bound, first: a keys file, a limit, an address or a port it
    # cannot have stops before the model's seconds.
    if http.api_keys:
        ApiKeys(http.api_keys)  # read again by the app: its refusal names the file and line
    limits = ServeLimits(**given_fields(args, ENGINE_LIMITS))
    sock = listen(args.host, args.port)
    # Importing torch and loading the model take seconds (16 s for a large model on a cold
    # disk): say so before, so that the wait is not silence (resolving --device auto would
    # import torch first; the engine's description names the device once it is loaded).
    on = "" if args.device == "auto" else f" on {args.device}"
    print(
        f"loading {args.checkpoint}{on} for {socket_url(args.host, sock)} ...",
        file=sys.stderr,
        flush=True,
    )
    from transformer_mt.inference.line_settings import LineSettings
    from transformer_mt.machine import keep_freed_memory
    from transformer_mt.serve.engine import Engine

    keep_freed_memory()
    if device_of(args) == "cpu":
        set_cpu_threads()
    engine = Engine.from_checkpoint(
        args.checkpoint,
        limits=limits,
        device=device_of(args),
        quantize=args.quantize,
        lines=LineSettings(src_lang=args.src_lang, tgt_lang=args.tgt_lang),
        shortlist=args.shortlist,
    )
    print(engine.describe(), file=sys.stderr)
    serve(engine, sock, args.host, settings=http)
    return 0
