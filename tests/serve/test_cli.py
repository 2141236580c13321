"""`tmt serve` wires its flags into the engine's constructor and the server, and says which
extra to install when the serve dependencies are missing."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest

from transformer_mt import cli, serve
from transformer_mt.cli import serve as serve_command
from transformer_mt.errors import SettingError
from transformer_mt.serve.http_settings import HttpSettings


@dataclasses.dataclass(frozen=True)
class StandInLimits:
    """The ServeLimits fields `tmt serve` sets (None: the engine's default)."""

    max_batch_tokens: int | None = None
    max_queue: int | None = None
    kv_blocks: int | None = None
    block_size: int | None = None
    cache_entries: int | None = None


class StandInEngine:
    built: list[tuple] = []

    @classmethod
    def from_checkpoint(cls, path, *, limits, device, quantize, lines, shortlist=None):
        engine = cls()
        languages = (lines.src_lang, lines.tgt_lang)
        cls.built.append((path, device, quantize, limits, *languages, shortlist))
        return engine

    def describe(self) -> str:
        return "stand-in engine"


@pytest.fixture
def served(monkeypatch):
    """The (engine, socket, host) `serve` was called with, engine.py and server.py stood in
    for (the server module imports uvicorn, which this test must not need); the stand-in
    socket is the (host, port) it was bound to."""
    calls = []
    engine_module = types.SimpleNamespace(Engine=StandInEngine, ServeLimits=StandInLimits)
    server_module = types.SimpleNamespace(
        listen=lambda host, port: (host, port),
        socket_url=lambda host, sock: f"http://{host}:{sock[1]}",
        serve=lambda *args, **kwargs: calls.append((args, kwargs)),
    )
    monkeypatch.setitem(sys.modules, "transformer_mt.serve.engine", engine_module)
    monkeypatch.setitem(sys.modules, "transformer_mt.serve.server", server_module)
    monkeypatch.setattr(serve, "missing_dependencies", lambda: [])
    monkeypatch.setattr(serve_command, "set_cpu_threads", lambda: None)
    StandInEngine.built.clear()
    return calls


def test_serve_passes_the_flags_to_the_engine_and_the_server(served):
    argv = ["serve", "--checkpoint", "best.pt", "--port", "9000", "--max-queue", "32"]
    assert cli.main([*argv, "--kv-blocks", "512", "--block-size", "8", "--quantize", "int8"]) == 0
    ((path, device, quantize, limits, src_lang, tgt_lang, shortlist),) = StandInEngine.built
    assert (path, device, quantize, src_lang, tgt_lang) == ("best.pt", "cpu", "int8", None, None)
    assert shortlist is None

    assert limits == StandInLimits(max_queue=32, kv_blocks=512, block_size=8)
    (((engine, sock, host), kwargs),) = served
    assert isinstance(engine, StandInEngine) and sock == ("127.0.0.1", 9000)
    assert host == "127.0.0.1"
    assert kwargs == {"settings": HttpSettings()}
    StandInEngine.built.clear()
    assert cli.main([*argv, "--src-lang", "deu_Latn", "--tgt-lang", "fra_Latn"]) == 0
    assert StandInEngine.built[0][4:6] == ("deu_Latn", "fra_Latn")
    StandInEngine.built.clear()
    assert cli.main([*argv, "--shortlist", "list.vmap"]) == 0
    assert StandInEngine.built[0][6] == "list.vmap"


def test_serve_says_what_it_loads_before_it_loads_it(served, capsys, monkeypatch):
    said = []
    build = StandInEngine.from_checkpoint

    def from_checkpoint(*args, **kwargs):  # what stderr held when loading began
        said.append(capsys.readouterr().err)
        return build(*args, **kwargs)

    monkeypatch.setattr(StandInEngine, "from_checkpoint", from_checkpoint)
    assert cli.main(["serve", "--checkpoint", "best.pt", "--port", "9000"]) == 0
    assert said == ["loading best.pt for http://127.0.0.1:9000 ...\n"]  # --device auto
    assert capsys.readouterr().err == "stand-in engine\n"


def test_serve_leaves_unset_limits_to_the_engine(served):
    assert cli.main(["serve", "--checkpoint", "best.pt", "--host", "0.0.0.0"]) == 0
    assert StandInEngine.built[0][3] == StandInLimits()
    assert served[0][0][1:] == (("0.0.0.0", 8000), "0.0.0.0")


def test_serve_passes_who_may_connect_to_the_server(served):
    argv = ["serve", "--checkpoint", "best.pt", "--allowed-hosts", "mt.example", "*.corp"]
    argv += ["--cors-origins", "https://app.example", "--max-connections", "64"]
    assert cli.main([*argv, "--max-client-connections", "8"]) == 0
    assert served[0][1]["settings"] == HttpSettings(
        max_connections=64,
        max_client_connections=8,
        allowed_hosts=("mt.example", "*.corp"),
        cors_origins=("https://app.example",),
    )


def test_a_cors_origin_without_a_scheme_is_one_line(served, capsys):
    argv = ["serve", "--checkpoint", "best.pt", "--cors-origins", "app.example"]
    assert cli.main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "app.example" in line and "scheme://host" in line and not served


def test_serve_without_the_extra_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setattr(serve, "missing_dependencies", lambda: ["fastapi"])
    assert cli.main(["serve", "--checkpoint", "best.pt"]) == 2
    err = capsys.readouterr().err
    assert err == "error: tmt serve needs the serve extra: pip install 'transformer_mt[serve]'\n"


def test_a_port_in_use_names_the_flag():
    pytest.importorskip("uvicorn")
    from transformer_mt.serve.server import listen

    taken = listen("127.0.0.1", 0)
    taken.listen()
    port = taken.getsockname()[1]
    with pytest.raises(SettingError) as refused:
        listen("127.0.0.1", port)
    taken.close()
    assert cli.flag_message(refused.value).startswith(f"--port {port}: cannot listen on")


@pytest.mark.parametrize("port", [99999, -1, 65536])
def test_a_port_out_of_range_is_one_line_naming_the_flag(port):
    pytest.importorskip("uvicorn")
    from transformer_mt.serve.server import listen

    with pytest.raises(SettingError) as refused:
        listen("127.0.0.1", port)
    assert cli.flag_message(refused.value) == (
        f"--port {port}: must be a port number from 0 to 65535"
    )


@pytest.mark.parametrize("host", ["999.1.1.1", "192.0.2.1", "no-such-host.invalid"])
def test_a_host_that_cannot_be_listened_on_is_blamed_not_the_port(host):
    """Not an address (999.1.1.1), an address of another machine (TEST-NET-1), no name."""
    pytest.importorskip("uvicorn")
    from transformer_mt.serve.server import listen

    with pytest.raises(SettingError) as refused:
        listen(host, 8000)
    assert refused.value.setting == "host"
    message = cli.flag_message(refused.value)
    assert message.startswith(f"--host {host}: not an address")
    assert "port" not in message and "8000" not in message


def test_tmt_serve_with_a_port_out_of_range_says_so_before_loading(tmp_path, capsys):
    """The address is bound before the model is loaded: a bad one stops at once (here the
    checkpoint does not even exist)."""
    pytest.importorskip("uvicorn")
    missing = tmp_path / "missing.pt"
    assert cli.main(["serve", "--checkpoint", str(missing), "--port", "99999"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: --port 99999: must be a port number from 0 to 65535"]


def test_a_block_size_past_any_position_table_names_the_flag():
    from transformer_mt.serve.engine.limits import ServeLimits

    with pytest.raises(SettingError) as refused:
        ServeLimits(block_size=10**20)
    assert cli.flag_message(refused.value) == f"--block-size {10**20}: must be at most 65536"


def test_a_bad_keys_file_stops_the_server_before_it_loads_the_model(served, tmp_path, capsys):
    """Checked before the address is bound and the model loaded (seconds for a large one)."""
    keys = tmp_path / "keys.txt"
    keys.write_text("shortkey 5 5\n", encoding="utf-8")
    assert cli.main(["serve", "--checkpoint", "best.pt", "--api-keys", str(keys)]) == 2
    err = capsys.readouterr().err
    assert StandInEngine.built == [] and served == [] and "loading" not in err
    assert err == f"error: --api-keys {keys}: {keys} line 1: a key must be at least 16 " + (
        "printable ASCII characters\n"
    )


def test_a_queue_of_no_sentences_names_the_flag():
    """It had started, then answered every request 413."""
    from transformer_mt.serve.engine.limits import ServeLimits

    with pytest.raises(SettingError) as refused:
        ServeLimits(max_queue=0)
    assert cli.flag_message(refused.value) == "--max-queue 0: must be at least 1"


def test_a_kv_pool_larger_than_the_memory_names_the_flag_before_allocating(checkpoint):
    from transformer_mt.inference.translator import Translator
    from transformer_mt.serve.engine.limits import ServeLimits, new_pool

    translator = Translator.from_checkpoint(str(checkpoint))
    limits = ServeLimits(kv_blocks=10**20)
    with pytest.raises(SettingError) as refused:
        new_pool(translator, limits, 1024)
    message = cli.flag_message(refused.value)
    assert message.startswith(f"--kv-blocks {10**20}: a KV pool of ")
    assert " bytes a block), and this machine has " in message and message.endswith(
        " GiB available"
    )
    assert new_pool(translator, ServeLimits(kv_blocks=64), 1024).n_blocks == 64


def test_the_pool_says_how_long_a_sentence_it_holds(checkpoint, caplog):
    """At start: a pool given too small for the position table warns in the log before the
    first request is refused; the line the server prints says what any pool holds."""
    import logging
    import math

    from transformer_mt.inference.translator import Translator
    from transformer_mt.serve.engine import Engine
    from transformer_mt.serve.engine.limits import ServeLimits, longest_output, new_pool

    translator = Translator.from_checkpoint(str(checkpoint))
    beam, table = translator.decode.beam_size, translator.model.cfg.max_positions
    with caplog.at_level(logging.INFO, logger="transformer_mt.serve.engine.limits"):
        new_pool(translator, ServeLimits(block_size=4), 1024)
        assert not caplog.records  # the default holds a sentence as long as the table
        new_pool(translator, ServeLimits(kv_blocks=3 * beam, block_size=4), 1024)
    (small,) = caplog.records
    assert small.levelname == "WARNING" and small.message == (
        f"a KV pool of {3 * beam} blocks of 4 position(s) holds outputs of up to 8 positions at "
        f"beam {beam}, fewer than the model's {table}: longer ones are refused"
    )
    engine = Engine(translator, ServeLimits(kv_blocks=3 * beam, block_size=4))
    assert f"outputs of up to 8 positions at beam {beam};" in engine.describe()
    large = Engine(translator, ServeLimits(kv_blocks=100 * table, block_size=1))
    assert f"outputs of up to {table} positions at beam {beam};" in large.describe()
    for n_blocks, size in [(10, 1), (3 * beam, 4), (7 * beam + 3, 16)]:
        reach = longest_output(n_blocks, size, beam)  # admission's count fits, one more does not
        assert beam * (math.ceil(reach / size) + 1) <= n_blocks
        assert beam * (math.ceil((reach + 1) / size) + 1) > n_blocks
