"""`tmt translate`: line count kept, order restored, batch == single, one-line errors."""

import dataclasses
import io
import math
import sys
import warnings

import pytest
import torch
from torch import nn
from torch.ao.nn.intrinsic import LinearReLU
from torch.ao.quantization import quantize_dynamic

from transformer_mt import cli
from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import flags as cli_flags
from transformer_mt.cli import main, translator_flags
from transformer_mt.config import DecodeConfig
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.inference import quantize
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.packed import bucketed_rows
from transformer_mt.inference.quantize import (
    Int8Linear,
    fastest_engine,
    int8_engines,
    quantize_int8,
)
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.stream import format_translation, stream_progress, translate_stream
from transformer_mt.inference.translator import Translator
from transformer_mt.machine import Choice
from transformer_mt.model.layers import FeedForward
from transformer_mt.timed_choices import TimedChoices

from ..conftest import WORDS, teacher_forced_log_probs


@dataclasses.dataclass
class Done:
    returncode: int
    stdout: bytes
    stderr: bytes


@pytest.fixture
def run_cli(tmp_path, monkeypatch, capsysbinary):
    """`tmt translate ARGS` in this process, `stdin` its standard input: a process each took
    3 s of importing torch. (The entry point's own process is tested in test_cli_hostile.)"""

    def run(*args, stdin: bytes = b"") -> Done:
        (tmp_path / "stdin").write_bytes(stdin)
        with (tmp_path / "stdin").open("rb") as source:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(source, encoding="utf-8"))
            try:
                status = main(["translate", *args])
            except SystemExit as stop:  # an argument argparse refuses
                status = stop.code
        out, err = capsysbinary.readouterr()
        return Done(status, out, err)

    return run


def test_line_count_kept_with_empty_long_and_unicode_lines(run_cli, checkpoint, tmp_path):
    lines = [
        "ein mann fährt rad",
        "",
        "   ",
        " ".join(WORDS * 10),  # far beyond max_positions=64
        "zwei hunde 🐕🐕 spielen — «im» schnee ß Ω 漢字",
        "",
    ]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    result = run_cli("--checkpoint", str(checkpoint), "--input", str(source), "--output", str(out))
    assert result.returncode == 0, result.stderr.decode()
    produced = out.read_text(encoding="utf-8").split("\n")
    assert produced[-1] == "" and len(produced) - 1 == len(lines)
    assert produced[1] == produced[2] == produced[5] == ""
    assert b"1 line(s) longer" in result.stderr


def test_stdin_to_stdout_and_nbest(run_cli, checkpoint):
    result = run_cli(
        "--checkpoint", str(checkpoint), "--nbest", "2", stdin=b"ein mann\n\ndas buch\n"
    )
    assert result.returncode == 0, result.stderr.decode()
    rows = result.stdout.decode().splitlines()
    # Two hypotheses per line; an empty line has two empty translations of score 0.
    assert [r.split(" ||| ")[0] for r in rows] == ["0", "0", "1", "1", "2", "2"]
    assert rows[2] == rows[3] == "1 |||  ||| 0.0000"


def test_batch_equals_each_sentence_alone(checkpoint):
    translator = Translator.from_checkpoint(str(checkpoint), beam_size=3)
    lines = ["ein mann fährt rad", "das buch", "", "zwei hunde spielen im schnee eine frau"]
    together = [t.texts for t in translator.translate(lines)]
    alone = [translator.translate([line])[0].texts for line in lines]
    assert together == alone


LETTERLESS = ["2024", "12:30", "🐕🐕", "* * *", "(3)", "½ ≈ 0,5", "١٢٣"]


def test_text_without_a_letter_is_its_own_translation(checkpoint):
    """Numbers, times, emoji and rules are not searched: the model had written a caption for
    each ("2024" -> "There are two men are walking down."). Such a sentence of a line is kept
    as the line's other sentences are translated."""
    translator = Translator.from_checkpoint(str(checkpoint), beam_size=3, n_best=2)
    found = translator.translate([*LETTERLESS, "ein mann fährt rad.\n\n2024", "  "])
    for text, translation in zip(LETTERLESS, found, strict=False):
        assert translation.texts == [text, text] and translation.scores == [0.0, 0.0]
    mixed, blank = found[-2:]
    alone = translator.translate(["ein mann fährt rad."])[0].texts[0]
    assert mixed.texts[0] == f"{alone}\n\n2024"
    assert blank.texts == ["", ""]
    # Its whitespace as the model writes it (a TAB would split an --alignments line); a line
    # of digits beyond the position table is kept whole, never cut.
    assert translator.translate(["  12\t30 "])[0].texts[0] == "12 30"
    digits = " ".join(["1234"] * 400)
    assert translator.translate([digits])[0].texts[0] == digits
    assert translator.encoding.truncated_lines == 0


def test_a_prefix_or_phrases_given_to_text_without_a_letter_are_searched(checkpoint):
    translator = Translator.from_checkpoint(str(checkpoint), beam_size=3)
    word = translator.translate(["ein mann fährt rad"])[0].texts[0].split()[-1]
    prefixed = translator.translate(Texts.of(["2024"], prefixes=[word]))[0].texts[0]
    assert prefixed.startswith(word)
    blank_prefix = Texts.of(["2024", "2024"], prefixes=[" ", ""], constraints=[[" "], []])
    assert [t.texts[0] for t in translator.translate(blank_prefix)] == ["2024", "2024"]
    constrained = translator.translate(Texts.of(["2024"], constraints=[[word]]))[0].texts[0]
    assert word in constrained


def test_the_model_reads_no_bidi_passage_controls(checkpoint):
    """Each control had been read as an unknown piece, which changed the translation."""
    translator = Translator.from_checkpoint(str(checkpoint), beam_size=2)
    plain, wrapped = "ein mann fährt rad", "\u202bein mann\u2067 fährt\u2069 rad\u202c"
    assert translator.encoding.source_ids(wrapped) == translator.encoding.source_ids(plain)
    assert translator.encoding.source_pieces(wrapped) == translator.encoding.source_pieces(plain)
    assert translator.translate([wrapped])[0].texts == translator.translate([plain])[0].texts


@pytest.mark.parametrize(
    "stdin,args,message",
    [
        (b"ok\n\xff\xfe\n", [], "<stdin>:2: not valid UTF-8"),
        # UTF-16: valid UTF-8 but for its NUL bytes, which would have split it into more lines
        ("Ein Mann.\nZwei Hunde.\n".encode("utf-16-le"), [], "<stdin>:1: a NUL byte at column 2"),
        ("Ein Mann.\n".encode("utf-16"), [], "UTF-16? convert it"),
        ("日本\n".encode("utf-16"), [], "(byte 0xff at column 1): not UTF-8 text (UTF-16?"),
        (b"", ["--input", "/no/such/file"], "/no/such/file"),
        (b"", ["--beam-size", "0"], "error: --beam-size 0: must be > 0"),
    ],
)
def test_bad_input_gives_one_line_error(run_cli, checkpoint, stdin, args, message):
    result = run_cli("--checkpoint", str(checkpoint), *args, stdin=stdin)
    stderr = result.stderr.decode().strip()
    assert result.returncode == 2
    assert message in stderr and "Traceback" not in stderr and len(stderr.splitlines()) == 1


def test_missing_checkpoint_is_one_line(run_cli, tmp_path):
    result = run_cli("--checkpoint", str(tmp_path / "none.pt"))
    assert result.returncode == 2 and b"checkpoint not found" in result.stderr


def test_int8_keeps_line_count(run_cli, checkpoint, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("ein mann fährt rad\n\ndas buch\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    result = run_cli(
        "--checkpoint", str(checkpoint), "--input", str(source), "--output", str(out),
        "--quantize", "int8",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert out.read_text(encoding="utf-8").count("\n") == 3
    assert b"Warning" not in result.stderr


def test_int8_leaves_the_quantized_engine_setting_alone(checkpoint):
    before = torch.backends.quantized.engine
    Translator.from_checkpoint(str(checkpoint), quantize="int8")
    assert torch.backends.quantized.engine == before


def test_int8_log_probs_close_to_float32_and_float32_unchanged(checkpoint):
    float32 = Translator.from_checkpoint(str(checkpoint), beam_size=2)
    default = Translator.from_checkpoint(str(checkpoint), quantize=None, beam_size=2)
    int8 = Translator.from_checkpoint(str(checkpoint), quantize="int8", beam_size=2)
    assert not any("quantized" in type(m).__module__ for m in float32.model.modules())
    assert isinstance(int8.model.output_projection, Int8Linear)
    lines = ["ein mann fährt rad", "das buch"]
    assert [t.texts for t in default.translate(lines)] == [
        t.texts for t in float32.translate(lines)
    ]
    expected = teacher_forced_log_probs(float32.model)
    actual = teacher_forced_log_probs(int8.model)
    # Loose: int8 weights and activations move each logit by a few hundredths on this model.
    torch.testing.assert_close(actual, expected, atol=0.1, rtol=0.0)


def test_int8_feed_forward_applies_relu_inside_its_product_as_the_unfused_layers_do(
    checkpoint, monkeypatch
):
    model = load_for_inference(str(checkpoint), torch.device("cpu")).model
    default = torch.backends.quantized.engine  # the engine quantize_dynamic packs for below
    monkeypatch.setattr(quantize, "fastest_engine", lambda layer: default)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unfused = quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)  # the slow twin
    fused = quantize_int8(model, TimedChoices(None, {}))
    ffns = [m for m in fused.modules() if isinstance(m, FeedForward)]
    assert ffns and all(isinstance(f.fc1, Int8Linear) and f.fc1.relu for f in ffns)
    assert all(isinstance(f.fc2, Int8Linear) and not f.fc2.relu for f in ffns)
    assert not any(isinstance(m, FeedForward) and m.fc1_activates for m in model.modules())
    src_ids = torch.tensor([[5, 9, 12, EOS_ID], [7, 8, EOS_ID, 0]])
    tgt_ids = torch.tensor([[BOS_ID, 5, 9, 12, 20], [BOS_ID, 7, 8, 30, 4]])
    with torch.no_grad():
        torch.testing.assert_close(fused(src_ids, tgt_ids), unfused(src_ids, tgt_ids))


@pytest.mark.parametrize("engine", int8_engines())
@pytest.mark.parametrize("relu", [False, True])
def test_int8_linear_calls_the_operator_of_torchs_module_with_the_same_result(relu, engine):
    torch.manual_seed(0)
    layer = nn.Linear(32, 48)
    with warnings.catch_warnings(), quantize._quantized_engine(engine):
        warnings.simplefilter("ignore")
        float_layer = LinearReLU(layer, nn.ReLU()) if relu else layer
        spec = {LinearReLU} if relu else {nn.Linear}
        module = quantize_dynamic(nn.Sequential(float_layer), spec, dtype=torch.qint8)[0]
    lean = Int8Linear(module, engine)
    assert lean.relu == relu and f"engine={engine}" in repr(lean)
    x = torch.randn(2, 7, 32)
    with torch.inference_mode():
        expected = module(x)
        assert (expected == 0).any() == relu
        assert torch.equal(lean(x), expected)
        # Every row count, padded to its bucket inside: the same bits as the module on the
        # padded rows (the activations' int8 scale spans zero, so zero rows leave it as it
        # is), and the unpadded product's but for the last bit (oneDNN's kernel for 1-5 rows
        # rounds differently on an Intel Xeon with AMX).
        for rows in range(1, 140):
            x = torch.randn(rows, 32)
            padded = torch.cat([x, x.new_zeros(bucketed_rows(rows) - rows, 32)])
            assert torch.equal(lean(x), module(padded)[:rows]), rows
            torch.testing.assert_close(lean(x), module(x), rtol=1e-6, atol=1e-6)


def test_int8_packs_each_kind_of_layer_for_the_engine_timed_fastest(checkpoint, monkeypatch):
    if "onednn" not in int8_engines():
        pytest.skip("this torch has no oneDNN quantised engine")
    model = load_for_inference(str(checkpoint), torch.device("cpu")).model
    vocab = model.output_projection.out_features
    asked = []

    def vocabulary_on_onednn(layer):  # what the timing might say on a Zen 4
        asked.append(quantize._kind(layer))
        wide = quantize._kind(layer)[1] == vocab
        return "onednn" if wide else torch.backends.quantized.engine

    monkeypatch.setattr(quantize, "fastest_engine", vocabulary_on_onednn)
    int8 = quantize_int8(model, TimedChoices(None, {}))
    layers = [m for m in int8.modules() if isinstance(m, Int8Linear)]
    assert len(asked) == len(set(asked)) < len(layers)  # each kind timed once
    assert {m.engine for m in layers if m.out_features == vocab} == {"onednn"}
    assert "onednn" not in {m.engine for m in layers if m.out_features != vocab}
    src_ids = torch.tensor([[5, 9, 12, EOS_ID], [7, 8, EOS_ID, 0]])
    tgt_ids = torch.tensor([[BOS_ID, 5, 9, 12, 20], [BOS_ID, 7, 8, 30, 4]])
    with torch.no_grad():
        expected = torch.log_softmax(model(src_ids, tgt_ids), -1)
        actual = torch.log_softmax(int8(src_ids, tgt_ids), -1)
    torch.testing.assert_close(actual, expected, atol=0.1, rtol=0.0)


def test_onednn_is_taken_where_its_product_is_clearly_faster(monkeypatch):
    """By ONEDNN_INT8_SPEEDUP: closer times flipped from one timing to the next."""
    if "onednn" not in int8_engines():
        pytest.skip("this torch has no oneDNN quantised engine")
    default = torch.backends.quantized.engine
    layer = nn.Linear(16, 24)
    cases = [([2.0, 1.0], "onednn"), ([1.1, 1.0], "onednn"), ([1.05, 1.0], default),
             ([1.0, 1.02], default), ([1.0, 2.0], default)]  # fmt: skip
    for times, expected in cases:
        monkeypatch.setattr(quantize, "best_times", lambda runs, repeats, t=times: t)
        assert fastest_engine(layer) == expected
    monkeypatch.undo()
    assert fastest_engine(layer, repeats=2) in (default, "onednn")  # really timed
    assert torch.backends.quantized.engine == default


@pytest.mark.parametrize(("amx", "native", "bf16"), [(True, True, True), (False, True, False)])
def test_int8_stores_the_cache_in_bfloat16_where_the_cpu_has_amx(
    checkpoint, monkeypatch, amx, native, bf16
):
    monkeypatch.setattr(
        "transformer_mt.inference.quantize.native_bf16", lambda: Choice(native, "pretended")
    )
    monkeypatch.setattr("transformer_mt.inference.quantize.cpu_has", lambda feature: amx)
    int8 = Translator.from_checkpoint(str(checkpoint), quantize="int8", beam_size=2)
    assert int8.cache_dtype == (torch.bfloat16 if bf16 else None)
    assert (int8.options.new_cache is None) == (not bf16)  # the dtype reaches the search
    assert int8.translate(["ein mann fährt rad"])[0].texts  # decodes through that cache
    float32 = Translator.from_checkpoint(str(checkpoint), beam_size=2)
    assert float32.cache_dtype is None


def test_unknown_quantization_is_refused(checkpoint):
    with pytest.raises(TmtError, match="choose one of int8"):
        Translator.from_checkpoint(str(checkpoint), device="cpu", quantize="int4")


# --- outputs that must survive, flags that must hold --------------------------------------------


def translate(checkpoint, *args):
    return main(["translate", "--checkpoint", str(checkpoint), *map(str, args)])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("via_link", [False, True])
def test_output_over_the_input_is_refused_and_the_input_kept(
    checkpoint, tmp_path, capsys, via_link
):
    source = tmp_path / "in.txt"
    source.write_text("ein mann fährt rad\ndas buch\n", encoding="utf-8")
    out = source
    if via_link:
        out = tmp_path / "link.txt"
        out.symlink_to(source)
    assert translate(checkpoint, "--input", source, "--output", out) == 2
    assert f"{out}: is the --input file itself" in one_error_line(capsys)
    assert source.read_text(encoding="utf-8") == "ein mann fährt rad\ndas buch\n"


def test_output_over_the_reference_or_checkpoint_is_refused(checkpoint, tmp_path, capsys):
    source, ref = tmp_path / "in.txt", tmp_path / "ref.txt"
    source.write_text("das buch\n", encoding="utf-8")
    ref.write_text("the book\n", encoding="utf-8")
    assert translate(checkpoint, "--input", source, "--ref", ref, "--output", ref) == 2
    assert "is the --ref file itself" in one_error_line(capsys)
    assert translate(checkpoint, "--input", source, "--output", checkpoint) == 2
    assert "is the --checkpoint itself" in one_error_line(capsys)
    assert ref.read_text(encoding="utf-8") == "the book\n"


def test_a_failed_run_leaves_an_existing_output_untouched(checkpoint, tmp_path, capsys):
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(b"ein mann\nkaputt \xff\ndas buch\n")
    out.write_text("yesterday's translations\n", encoding="utf-8")
    assert translate(checkpoint, "--input", source, "--output", out) == 2
    assert f"{source}:2: not valid UTF-8" in one_error_line(capsys)
    assert out.read_text(encoding="utf-8") == "yesterday's translations\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]  # no temp file


def test_output_folder_is_created_and_the_file_appears_complete(checkpoint, tmp_path):
    source, out = tmp_path / "in.txt", tmp_path / "new" / "folder" / "out.txt"
    source.write_text("ein mann\n\ndas buch\n", encoding="utf-8")
    assert translate(checkpoint, "--input", source, "--output", out, "--beam-size", "1") == 0
    assert out.read_text(encoding="utf-8").count("\n") == 3
    assert [p.name for p in out.parent.iterdir()] == ["out.txt"]


def test_nbest_keeps_the_checkpoints_beam(checkpoint, tmp_path, capsys):
    lines = ["ein mann fährt rad", "zwei hunde spielen im schnee", "das buch"]
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert translate(checkpoint, "--input", source, "--output", out, "--nbest", "2") == 0

    def expected(beam_size: int) -> str:
        translator = Translator.from_checkpoint(str(checkpoint), beam_size=beam_size, n_best=2)
        rows = [format_translation(t, i, 2) for i, t in enumerate(translator.translate(lines))]
        return "\n".join(rows) + "\n"

    assert Translator.from_checkpoint(str(checkpoint)).decode.beam_size == 5
    assert expected(2) != expected(5)  # so the comparison below tells the two beams apart
    assert out.read_text(encoding="utf-8") == expected(5)
    capsys.readouterr()
    assert translate(checkpoint, "--input", source, "--nbest", "3", "--beam-size", "2") == 2
    assert "--nbest 3 must be <= --beam-size 2" in one_error_line(capsys)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_length_penalty_must_be_a_finite_number(checkpoint, capsys, value):
    assert translate(checkpoint, f"--length-penalty={value}") == 2
    assert f"--length-penalty {float(value)}: must be a finite number" in one_error_line(capsys)


def test_ref_scores_and_refuses_empty_or_mismatched_files_before_translating(
    checkpoint, tmp_path, capsys
):
    empty, source, ref = tmp_path / "empty.txt", tmp_path / "in.txt", tmp_path / "ref.txt"
    empty.write_bytes(b"")
    source.write_text("ein mann\ndas buch\n", encoding="utf-8")
    ref.write_text("a man\n", encoding="utf-8")
    assert translate(checkpoint, "--input", empty, "--ref", empty) == 2
    assert f"{empty} and {empty} are empty: there is nothing to score" in one_error_line(capsys)
    missing = tmp_path / "no.pt"  # the reference is checked before the checkpoint is loaded
    assert (
        main(["translate", "--checkpoint", str(missing), "--input", str(source), "--ref", str(ref)])
        == 2
    )
    assert f"{source} has 2 lines but {ref} has 1" in one_error_line(capsys)
    out = tmp_path / "out.txt"
    assert translate(checkpoint, "--input", source, "--output", out, "--beam-size", "1") == 0
    out.replace(ref)  # its own translations as references: a perfect score
    capsys.readouterr()
    args = ["--input", source, "--ref", ref, "--output", out, "--beam-size", "1"]
    assert translate(checkpoint, *args) == 0
    err = capsys.readouterr().err
    assert "chrF2|" in err and any(
        line.startswith("BLEU|") and line.split(" = ")[1].startswith("100.0")
        for line in err.splitlines()
    ), err


# --- progress without a terminal --------------------------------------------------------------


def test_progress_lines_without_a_terminal_count_up_to_the_total(checkpoint, capsys):
    translator = Translator.from_checkpoint(str(checkpoint), beam_size=1, max_tokens=8)
    lines = ["ein mann fährt rad", "", "das buch", "zwei hunde spielen", "frau liest", "im schnee"]
    out = io.StringIO()
    progress = stream_progress(len(lines), every_s=0.0)
    count = translate_stream(translator, lines, out, 4, progress=progress)
    assert count == len(lines) and out.getvalue().count("\n") == len(lines)
    reports = capsys.readouterr().err.splitlines()
    done = [int(line.split()[1].split("/")[0]) for line in reports]
    assert len(reports) >= 3 and done == sorted(done) and done[-1] == len(lines)
    assert all(f"/{len(lines)} lines (" in r and "sentences/s, ETA " in r for r in reports)
    progress = stream_progress(len(lines), every_s=600)
    translate_stream(translator, lines, io.StringIO(), 4, progress=progress)
    assert capsys.readouterr().err == ""  # a short input: no report before the interval


def test_cli_reports_progress_when_stderr_is_not_a_terminal(
    checkpoint, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(translator_flags, "PROGRESS_SECONDS", 0.0)
    source = tmp_path / "in.txt"
    source.write_text("ein mann\ndas buch\n", encoding="utf-8")
    args = ["--input", source, "--output", tmp_path / "out.txt", "--beam-size", "1"]
    assert translate(checkpoint, *args) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-2].startswith("translated 2/2 lines (100%), ") and err[-1] == "translated 2 line(s)"
    assert not math.isnan(float(err[-2].split(", ")[1].split()[0]))


def test_prefix_file_starts_each_translation_and_must_match_the_input(checkpoint, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("hunde spielen im schnee\nein mann liest das buch\nfrau\n")
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("zwei hunde\n\nein\n")
    out = tmp_path / "out.txt"
    assert (
        translate(
            checkpoint,
            "--input",
            str(source),
            "--prefix",
            str(prefixes),
            "--output",
            str(out),
            "--beam-size",
            "3",
        )
        == 0
    )
    first, second, third = out.read_text().splitlines()
    assert first.startswith("zwei hunde") and third.startswith("ein")
    unforced = Translator.from_checkpoint(str(checkpoint), beam_size=3)
    assert second == unforced.translate(["ein mann liest das buch"])[0].texts[0]
    prefixes.write_text("zwei hunde\n")
    capsys.readouterr()
    assert translate(checkpoint, "--input", str(source), "--prefix", str(prefixes)) == 2
    assert "1 prefix line(s) for the 3 line(s)" in one_error_line(capsys)


def test_decode_flags_set_decode_fields_with_their_types():
    args = cli.build_parser().parse_args(
        ["translate", "--checkpoint", "x.pt", "--nbest", "2", "--length-penalty", "1"]
    )
    changes = cli_flags.decode_changes(args)
    assert changes == {"n_best": 2, "length_penalty": 1.0}
    assert isinstance(changes["length_penalty"], float)
    assert set(cli_flags.DECODE_FLAGS) <= {f.name for f in dataclasses.fields(DecodeConfig)}


# --- sentences inside a line (inference/sentences.py) ------------------------------------------

SENTENCES = ("Ein mann fährt rad.", "Das buch liest eine frau!")
PARAGRAPH = f"  {SENTENCES[0]}\t {SENTENCES[1]} "


def test_a_line_of_sentences_is_its_sentences_translated_alone_and_joined(checkpoint):
    translator = Translator.from_checkpoint(str(checkpoint), beam_size=3, n_best=2)
    (line,) = translator.translate([PARAGRAPH])
    first, second = translator.translate(list(SENTENCES))
    # The k-th hypothesis joins the sentences' k-th, scored by the sum of their scores, with
    # the whitespace of the line kept verbatim.
    pairs = list(zip(first.texts, second.texts, strict=True))
    assert line.texts == [f"  {a}\t {b} " for a, b in pairs]
    sums = [a + b for a, b in zip(first.scores, second.scores, strict=True)]
    assert line.scores == pytest.approx(sums)


def test_a_line_of_one_sentence_translates_as_without_splitting(checkpoint):
    lines = ["ein mann fährt rad", "  Das buch liest eine frau!  ", "", "zwei hunde. "]
    split = Translator.from_checkpoint(str(checkpoint), beam_size=2)
    whole = Translator.from_checkpoint(
        str(checkpoint), beam_size=2, lines=LineSettings(split_sentences=False)
    )
    assert split.translate(lines) == whole.translate(lines)


def test_splitting_is_off_when_asked_with_a_forced_prefix_and_with_alignments(checkpoint):
    translator = Translator.from_checkpoint(str(checkpoint))
    default = [translator.default]
    assert translator.split([PARAGRAPH], default).sentences == list(SENTENCES)
    forced = Texts.of([PARAGRAPH], prefixes=["ein"])
    assert translator.split(forced, default).sentences == [PARAGRAPH]
    blank = Texts.of([PARAGRAPH], prefixes=[" "])
    assert translator.split(blank, default).sentences == list(SENTENCES)
    unsplit = Translator.from_checkpoint(str(checkpoint), lines=LineSettings(split_sentences=False))
    assert unsplit.split([PARAGRAPH], default).sentences == [PARAGRAPH]
    aligned = Translator.from_checkpoint(str(checkpoint), lines=LineSettings(alignment_layer=-1))
    assert aligned.split([PARAGRAPH], default).sentences == [PARAGRAPH]
    (translation,) = aligned.translate([PARAGRAPH])
    assert translation.alignment is not None


def test_progress_counts_lines_finished_not_sentences(checkpoint):
    # A budget of 8 tokens puts about one sentence in a batch: a line of three sentences is
    # counted once, by the batch of its last.
    translator = Translator.from_checkpoint(str(checkpoint), beam_size=1, max_tokens=8)
    lines = [" ".join(SENTENCES + ("Zwei hunde spielen.",)), "", "das buch", PARAGRAPH]
    counts: list[int] = []
    translations = translator.translate(lines, counts.append)
    assert len(counts) >= 4 and sum(counts) == 3  # the blank line is never searched
    assert translations[1].texts == [""]


def test_cli_no_split_translates_each_line_whole(checkpoint, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text(f"{PARAGRAPH}\nein mann\n", encoding="utf-8")
    for flags, split_sentences in [([], True), (["--no-split"], False)]:
        out = tmp_path / "out.txt"
        assert translate(checkpoint, "--input", source, "--output", out, *flags) == 0
        translator = Translator.from_checkpoint(
            str(checkpoint), lines=LineSettings(split_sentences=split_sentences)
        )
        expected = [t.texts[0] for t in translator.translate([PARAGRAPH, "ein mann"])]
        assert out.read_text(encoding="utf-8").split("\n") == [*expected, ""]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"sampling": "false"}, "decode.sampling: expected true or false, got 'false'"),
        ({"length_norm": "bogus"}, "decode.length_norm: 'bogus' is not one of"),
        ({"beam_size": 2.5}, "decode.beam_size: expected an integer, got 2.5"),
        ({"beam_sise": 4}, "decode.beam_sise: unknown key (did you mean 'beam_size'?)"),
    ],
)
def test_decode_changes_given_to_from_checkpoint_are_checked_as_a_configs(
    checkpoint, changes, message
):
    """They had been set as given: "false" sampled (a non-empty string is true), 2.5 beams
    failed inside the search."""
    from transformer_mt.config import ConfigError

    with pytest.raises(ConfigError) as refused:
        Translator.from_checkpoint(str(checkpoint), **changes)
    assert str(refused.value).startswith(message)


def test_a_text_given_a_direction_the_model_does_not_offer_is_refused(checkpoint):
    """As the server refuses a request's: it had been translated in the model's own
    direction (French read as German), and any pair was cached without end."""
    translator = Translator.from_checkpoint(str(checkpoint))
    (own,) = translator.languages.directions
    assert translator.translate(Texts.of(["ein hund"], directions=[own]))[0].texts
    with pytest.raises(SettingError, match="src_lang=fr: the model has no such language"):
        translator.translate(Texts.of(["ein hund"], directions=[("fr", own[1])]))
    with pytest.raises(SettingError, match=f"does not translate {own[1]}->{own[0]}"):
        translator.translate(Texts.of(["ein hund"], directions=[own[::-1]]))


def test_a_line_whose_sentences_are_all_cut_is_counted_once(checkpoint):
    """The warning says lines: a line of two sentences longer than the position table had
    been counted twice."""
    translator = Translator.from_checkpoint(str(checkpoint))
    sentence = " ".join(WORDS * 10) + "."
    line = f"{sentence} {sentence[0].upper()}{sentence[1:]}"
    assert len(translator.split([line], [translator.default]).sentences) == 2
    translator.translate([line, "ein mann", sentence])
    assert translator.encoding.truncated_lines == 2
