"""Serving under load: our server, the same with batching off, CTranslate2 per request, offline.

    python scripts/benchmark.py serve --checkpoint CKPT [--sentences 400] [--clients 32]
        [--rates 2 8 0] [--systems ours one-at-a-time ct2] [--beam-size 5] [--threads 1]
        [--server-core 1] [--max-seconds 120] [--shortlist VMAP]

Every server runs in its own process on `--server-core` with `--threads` torch threads, behind
the same HTTP layer (`transformer_mt.serve.http`); the clients run in this process on the other
cores, so that they never take the server's core. Systems:

    ours           `tmt serve`: continuous batching, paged KV cache, caches off (every
                   request decodes: the caches would turn repeats into free answers)
    one-at-a-time  the same engine admitting one sentence at a time (as a server that
                   translates one request at a time behind a lock does)
    ct2            CTranslate2's `translate_batch` called once per request, one request at a
                   time, as LibreTranslate and quickmt do (the weights through our exporter,
                   as in bench_translate; needs sinusoidal or learned positions)
    offline        `Translator.translate` of all the sentences at once: the ceiling

Load: `--clients` client threads send Multi30k test2016 sentences (the first `--sentences`),
one sentence per request, at `--rates` sentences/s in total (Poisson arrivals; 0: as fast as
the clients go, saturation), each run stopped after its sentences or `--max-seconds`. Latency
is from sending a request to its answer. While a run lasts, /metrics is read every 0.25 s:
`kv_vs_dense` is (KV blocks in use x block size) / (positions a dense cache with one copy per
hypothesis would hold), both summed over the samples with work in flight. `agreement` is the
share of served best translations equal to the offline ones (ours: the same search).
`vs_alone` is the median over served sentences of latency / the time to translate that
sentence alone (measured offline, for the first `--single` sentences; a run that served
others leaves it empty).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_machine import run_standalone  # noqa: E402

from transformer_mt.cli.common import Parser  # noqa: E402
from transformer_mt.inference.requests import Texts  # noqa: E402
from transformer_mt.text_files import read_lines  # noqa: E402

SYSTEMS = ["ours", "one-at-a-time", "ct2"]
DEFAULT_DATA = REPO / "data" / "multi30k" / "test2016.de"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--input", type=Path, default=DEFAULT_DATA, help="one sentence a line")
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rates", type=float, nargs="+", default=[2.0, 8.0, 0.0])
    parser.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument(
        "--shortlist", help="vocabulary map (`tmt shortlist`) for ours, one-at-a-time, offline"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--server-core", type=int, default=1)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--block-size", type=int, default=1)
    parser.add_argument(
        "--single", type=_at_least_one, default=100, help="sentences timed alone (1 or more)"
    )
    parser.add_argument("--serve", choices=[*SYSTEMS, "offline"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)


def _at_least_one(text: str) -> int:
    """An argparse type: the latency of one sentence alone is the median of at least one."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: time at least 1 sentence alone")
    return value


def run(args: argparse.Namespace) -> list[dict]:
    if args.shortlist and "ct2" in args.systems:
        raise SystemExit("--shortlist: for ours and one-at-a-time; leave ct2 out of --systems")
    sentences = [line for line in read_lines(args.input) if line.strip()][: args.sentences]
    offline = _offline(args, sentences)
    rows = [offline["row"], offline["single"]]
    expected, alone = offline["translations"], offline["alone_s"]
    for system in args.systems:
        with _server(args, system) as url:
            for rate in args.rates:
                row = _load(url, sentences, args, rate)
                row.update(system=system, beam_size=args.beam_size, shortlist=args.shortlist)
                served = row.pop("translations")
                same = [served[i] == expected[i] for i in served]
                row["agreement"] = round(sum(same) / max(len(same), 1), 4)
                row["vs_alone"] = _vs_alone(row.pop("latencies"), alone)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


# --- the server processes -------------------------------------------------------------------


class _server:
    """A server for `system` in a child process on the server core; yields its URL."""

    def __init__(self, args: argparse.Namespace, system: str):
        self.args, self.system = args, system

    def __enter__(self) -> str:
        port = _free_port()
        command = [sys.executable, __file__, "--serve", self.system, "--port", str(port)]
        command += _server_flags(self.args)
        self.process = _pinned(self.args, command)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    return url
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{self.system} server did not start") from None
                time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def _server_flags(args: argparse.Namespace) -> list[str]:
    return [
        "--checkpoint", args.checkpoint, "--beam-size", str(args.beam_size),
        "--threads", str(args.threads), "--block-size", str(args.block_size),
        "--input", str(args.input), "--sentences", str(args.sentences),
        "--single", str(args.single),
        *(["--shortlist", args.shortlist] if args.shortlist else []),
    ]  # fmt: skip


def _pinned(args: argparse.Namespace, command: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    return subprocess.Popen(["taskset", "-c", str(args.server_core), *command], env=env, **kwargs)


def _free_port() -> int:
    from transformer_mt.serve.server import listen

    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    return port


def serve_main(args: argparse.Namespace) -> None:
    """The child process: one system behind the HTTP layer, or the offline measurement."""
    import torch

    from transformer_mt.machine import keep_freed_memory

    keep_freed_memory()  # as tmt translate and tmt serve do
    torch.set_num_threads(args.threads)
    if args.serve == "offline":
        print(json.dumps(_measure_offline(args)))
        return
    from transformer_mt.serve.server import listen, serve

    sock = listen("127.0.0.1", args.port)
    serve(_engine(args), sock, "127.0.0.1", log_level="warning")


def _engine(args: argparse.Namespace):
    import dataclasses

    from transformer_mt.inference.translator import Translator
    from transformer_mt.serve.engine import Engine, ServeLimits

    if args.serve == "ct2":
        return Ct2Engine(args)
    translator = Translator.from_checkpoint(
        args.checkpoint, beam_size=args.beam_size, shortlist=args.shortlist
    )
    one = args.serve == "one-at-a-time"
    limits = ServeLimits(
        block_size=args.block_size, cache_entries=0, max_batch_tokens=1 if one else None
    )
    engine = Engine(translator, limits)
    engine.defaults = dataclasses.replace(engine.defaults, beam_size=args.beam_size)
    return engine


class Ct2Engine:
    """CTranslate2 behind our HTTP layer: one `translate_batch` per request, one at a time."""

    def __init__(self, args: argparse.Namespace):
        import dataclasses

        import torch
        from bench_translate import _ct2_translator

        from transformer_mt.artifacts import load_for_inference
        from transformer_mt.inference.languages import Languages
        from transformer_mt.serve.engine import ServeLimits

        device = torch.device("cpu")
        bundle = load_for_inference(args.checkpoint, device)
        self.defaults = dataclasses.replace(bundle.config.decode, beam_size=args.beam_size)
        self.limits = ServeLimits()
        self.languages = Languages.of(bundle.specials, bundle.config.data.directions())
        self.failure = None  # a worker pool: a failed translation fails its request only
        self.src, self.tgt = bundle.src_tokenizer, bundle.tgt_tokenizer
        self.ids = {self.tgt.id_to_piece(i): i for i in range(self.tgt.vocab_size)}
        # The exporter's spec from the checkpoint's weights, float32, intra_threads = torch's
        # (set to --threads).
        self.model = _ct2_translator(bundle.model, self.src, self.tgt, "ct2", device)
        self.pool = concurrent.futures.ThreadPoolExecutor(1)

    def submit(self, texts, decode, on_token=None, scope=None):  # one client: no scopes
        future = self.pool.submit(self._translate, list(Texts.plain(texts).texts), decode)
        return _Ct2Job(future)

    def _translate(self, texts, decode):
        from transformer_mt.inference.translator import Translation

        results = []
        for text in texts:
            pieces = [self.src.id_to_piece(i) for i in self.src.encode(text)]
            found = self.model.translate_batch(
                [pieces],
                beam_size=decode.beam_size,
                max_decoding_length=int(decode.max_len_a * (len(pieces) + 1) + decode.max_len_b),
            )
            hypothesis = found[0].hypotheses[0]
            text = self.tgt.decode([self.ids[piece] for piece in hypothesis])
            results.append(Translation([text], [0.0]))
        return results

    def start(self) -> None:
        pass

    def stop(self, drain: bool = True) -> None:
        self.pool.shutdown(wait=drain)

    def stats(self):
        from transformer_mt.serve.contract import EngineStats

        return EngineStats(0, 0, 0, 0, 0, 0, 1, 0, 0, 0.0, 0, 0, {}, {}, {}, 0)


class _Ct2Job:
    def __init__(self, future: concurrent.futures.Future):
        self.future, self.queue_seconds = future, None

    def cancel(self) -> None:
        self.future.cancel()


# --- offline ----------------------------------------------------------------------------------


def _offline(args: argparse.Namespace, sentences: list[str]) -> dict:
    command = [sys.executable, __file__, "--serve", "offline", *_server_flags(args)]
    out = _pinned(args, command, stdout=subprocess.PIPE).communicate()[0]
    return json.loads(out)


def _measure_offline(args: argparse.Namespace) -> dict:
    from transformer_mt.inference.translator import Translator

    sentences = [line for line in read_lines(args.input) if line.strip()][: args.sentences]
    translator = Translator.from_checkpoint(
        args.checkpoint, beam_size=args.beam_size, shortlist=args.shortlist
    )
    translator.translate(sentences[:16])  # warm-up
    start = time.perf_counter()
    translations = translator.translate(sentences)
    seconds = time.perf_counter() - start
    alone = []
    for sentence in sentences[: args.single]:
        start = time.perf_counter()
        translator.translate([sentence])
        alone.append(time.perf_counter() - start)
    return {
        "row": {
            "system": "offline",
            "beam_size": args.beam_size,
            "completed": len(sentences),
            "sentences_per_s": round(len(sentences) / seconds, 2),
        },
        "single": {
            "system": "offline, one sentence alone",
            "beam_size": args.beam_size,
            "completed": len(alone),
            "p50_ms": round(1000 * statistics.median(alone), 1),
        },
        "translations": [t.texts[0] for t in translations],
        "alone_s": alone,
    }


# --- the clients ------------------------------------------------------------------------------


def _load(url: str, sentences: list[str], args: argparse.Namespace, rate: float) -> dict:
    """`args.clients` threads send the sentences at `rate`/s in total (0: back to back)."""
    rng = random.Random(0)
    arrivals, t = [], 0.0
    for _ in sentences:
        arrivals.append(t)
        t += rng.expovariate(rate) if rate > 0 else 0.0
    latencies, translations, lock = {}, {}, threading.Lock()
    next_index = iter(range(len(sentences)))
    start = time.monotonic()
    stop = start + args.max_seconds
    sampler = _KvSampler(url)

    def client() -> None:
        body_of = {"beam_size": args.beam_size}
        for i in iter(lambda: next(next_index, None), None):
            if start + arrivals[i] > stop or time.monotonic() > stop:
                return
            time.sleep(max(0.0, start + arrivals[i] - time.monotonic()))
            sent = time.monotonic()
            body = json.dumps({"text": sentences[i], **body_of}).encode()
            request = urllib.request.Request(f"{url}/v1/translate", body)
            with urllib.request.urlopen(request, timeout=600) as response:
                answer = json.load(response)
            with lock:
                latencies[i] = time.monotonic() - sent
                translations[i] = answer["translations"][0]["text"]

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    sampler.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - start
    sampler.stop()
    ordered = sorted(latencies.values())
    return {
        "rate": rate or "saturation",
        "clients": args.clients,
        "completed": len(ordered),
        "sentences_per_s": round(len(ordered) / wall, 2),
        "p50_ms": round(1000 * _quantile(ordered, 0.5), 1),
        "p95_ms": round(1000 * _quantile(ordered, 0.95), 1),
        "p99_ms": round(1000 * _quantile(ordered, 0.99), 1),
        **sampler.summary(),
        "translations": translations,
        "latencies": latencies,
    }


def _vs_alone(latencies: dict[int, float], alone: list[float]) -> float | None:
    """Median over served sentences of latency / time alone; None unless all were timed."""
    if not latencies or max(latencies) >= len(alone):
        return None
    return round(statistics.median(t / alone[i] for i, t in latencies.items()), 2)


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class _KvSampler:
    """Reads the server's KV figures from /metrics every 0.25 s while a run lasts."""

    def __init__(self, url: str):
        self.url, self.samples, self._done = url, [], threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._done.wait(0.25):
            with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
                text = response.read().decode()
            values = {}
            for line in text.splitlines():
                if line.startswith("tmt_kv_"):
                    name, value = line.split()[:2]
                    values[name] = float(value)
            self.samples.append(values)

    def summary(self) -> dict:
        busy = [s for s in self.samples if s.get("tmt_kv_dense_positions", 0) > 0]
        if not busy:
            return {"kv_blocks_peak": None, "kv_vs_dense": None}
        paged = sum(s["tmt_kv_blocks_used"] * s["tmt_kv_block_size"] for s in busy)
        dense = sum(s["tmt_kv_dense_positions"] for s in busy)
        return {
            "kv_blocks_peak": int(max(s["tmt_kv_blocks_used"] for s in busy)),
            "kv_vs_dense": round(paged / dense, 3),
        }


COLUMNS = [
    ("system", "system"),
    ("rate", "rate/s"),
    ("completed", "sentences"),
    ("sentences_per_s", "sent/s"),
    ("p50_ms", "p50 ms"),
    ("p95_ms", "p95 ms"),
    ("p99_ms", "p99 ms"),
    ("kv_blocks_peak", "KV blocks peak"),
    ("kv_vs_dense", "KV vs dense"),
    ("agreement", "= offline"),
    ("vs_alone", "latency / alone"),
]


def print_table(results: list[dict], file=sys.stdout) -> None:
    print("| " + " | ".join(title for _, title in COLUMNS) + " |", file=file)
    print("|" + "---|" * len(COLUMNS), file=file)
    for row in results:
        cells = ["" if row.get(key) is None else str(row[key]) for key, _ in COLUMNS]
        print("| " + " | ".join(cells) + " |", file=file)


def main() -> None:
    parser = Parser()
    add_arguments(parser)
    args, _ = parser.parse_known_args()
    if args.serve is not None:
        serve_main(args)
        return
    run_standalone(__doc__, add_arguments, run, print_table)


if __name__ == "__main__":
    main()
