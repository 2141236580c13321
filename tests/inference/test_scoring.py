"""Scoring pairs by forced decoding (`inference.scoring`, `tmt score`): batched scores against
each pair alone, a full forward by hand, beam search's own log-probabilities and CTranslate2's
`score_batch` on an exported model."""

import os
from typing import NamedTuple

import pytest
import torch

from transformer_mt.cli import main
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID
from transformer_mt.inference import scoring
from transformer_mt.inference.nbest import iter_nbest
from transformer_mt.inference.scoring import format_score, score_ids, score_pairs
from transformer_mt.inference.translator import Translator

from ..conftest import WORDS, fit_tiny_checkpoint

SOURCES = [
    "ein mann fährt rad",
    "das buch",
    "zwei hunde spielen im schnee",
    "eine frau liest das buch ein mann fährt rad zwei hunde",
    "schnee",
]
TARGETS = ["rad fährt mann ein", "buch das", "schnee im", "hunde zwei", "schnee schnee schnee"]


@pytest.fixture(scope="module")
def trained(checkpoint, tmp_path_factory):
    """The tiny model after a few steps of reversing the words of a sentence: hypotheses
    that end in EOS at different lengths, made of whole words, so that their text encodes
    back to the tokens searched (reversed subwords would not)."""
    tokenizer = Translator.from_checkpoint(str(checkpoint)).src_tokenizer
    texts = [" ".join(WORDS[i : i + 2 + i % 3]) for i in range(len(WORDS))]
    pairs = [(tokenizer.encode(t), tokenizer.encode(" ".join(t.split()[::-1]))) for t in texts]
    out = tmp_path_factory.mktemp("scoring") / "model.pt"
    return fit_tiny_checkpoint(checkpoint, pairs, 3e-2, 60, out)


def _by_hand(translator, source: str, target: str) -> float:
    """log P(target + EOS | source) from one full forward of the pair alone."""
    src = torch.tensor([[*translator.src_tokenizer.encode(source), EOS_ID]])
    tgt = translator.tgt_tokenizer.encode(target)
    with torch.no_grad():
        logits = translator.model(src, torch.tensor([[BOS_ID, *tgt]]))
    log_probs = torch.log_softmax(logits.double(), -1)[0]  # (T, V)
    return float(log_probs.gather(1, torch.tensor([*tgt, EOS_ID])[:, None]).sum())


@pytest.mark.parametrize("max_tokens", [None, 16, 1])
def test_batched_scores_equal_each_pair_alone_and_a_full_forward_by_hand(checkpoint, max_tokens):
    translator = Translator.from_checkpoint(str(checkpoint))
    batched = score_pairs(translator, SOURCES, TARGETS, max_tokens)
    for source, target, score in zip(SOURCES, TARGETS, batched, strict=True):
        (alone,) = score_pairs(translator, [source], [target])
        assert score.log_prob == pytest.approx(alone.log_prob, abs=1e-4)
        assert score.log_prob == pytest.approx(_by_hand(translator, source, target), abs=1e-4)
        assert score.n_tokens == len(translator.tgt_tokenizer.encode(target)) + 1
        assert score.per_token == pytest.approx(score.log_prob / score.n_tokens)
        assert not score.cut


def test_a_blank_source_is_not_scored_and_a_blank_target_is_eos_alone(checkpoint):
    translator = Translator.from_checkpoint(str(checkpoint))
    scores = score_pairs(translator, ["  ", "das buch", ""], ["das buch", " ", ""])
    assert scores[0] is None and scores[2] is None
    assert scores[1].n_tokens == 1
    assert scores[1].log_prob == pytest.approx(_by_hand(translator, "das buch", ""), abs=1e-4)
    assert format_score(None) == "nan\tnan"


def test_a_target_longer_than_the_position_table_is_scored_cut_and_said(checkpoint):
    translator = Translator.from_checkpoint(str(checkpoint))
    long = " ".join(WORDS * 10)
    (score,) = score_pairs(translator, ["das buch"], [long])
    assert score.cut and score.n_tokens == translator.model.cfg.max_positions


def test_beam_search_log_probs_equal_the_scorer_and_its_best_scores_highest(trained):
    """Without length normalisation a hypothesis' search score is its log-probability; the
    scorer reads the same tokens back through one forced pass."""
    translator = Translator.from_checkpoint(str(trained), beam_size=4, n_best=4, length_norm="none")
    sources = [translator.encoding.source_ids(text) for text in SOURCES]
    checked = 0
    for batch, found in translator.search_batches(sources):
        for row, result in zip(batch.indices.tolist(), found, strict=True):
            finished = [h for h in result.hypotheses if h.has_eos]
            scored = score_ids(
                translator.model,
                [sources[row]] * len(finished),
                [h.tokens for h in finished],
                translator.specials,
                max_tokens=7,
            )
            for hypothesis, (log_prob, n_tokens) in zip(finished, scored, strict=True):
                assert log_prob == pytest.approx(hypothesis.log_prob, abs=1e-4)
                assert n_tokens == hypothesis.length
            if finished and finished[0] is result.best:
                assert scored[0][0] == max(s for s, _ in scored)
                checked += 1
    assert checked >= 3
    translations = translator.translate(SOURCES)
    for source, translation in zip(SOURCES, translations, strict=True):
        scores = score_pairs(translator, [source] * 4, translation.texts)
        for score, searched in zip(scores, translation.scores, strict=True):
            assert score.log_prob == pytest.approx(searched, abs=1e-4)
        assert scores[0].log_prob == max(s.log_prob for s in scores)


def test_scores_equal_ctranslate2_score_batch_on_an_exported_model(trained, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    out = tmp_path / "ct2"
    assert main(["export", "--format", "ctranslate2", str(trained), str(out)]) == 0
    engine = ctranslate2.Translator(str(out), device="cpu", inter_threads=1, intra_threads=1)
    translator = Translator.from_checkpoint(str(trained))
    src, tgt = translator.src_tokenizer, translator.tgt_tokenizer
    targets = [*TARGETS[:-1], ""]
    results = engine.score_batch(
        [[src.id_to_piece(i) for i in src.encode(s)] for s in SOURCES],
        [[tgt.id_to_piece(i) for i in tgt.encode(t)] for t in targets],
    )
    ours = score_pairs(translator, SOURCES, targets, max_tokens=20)
    for score, result in zip(ours, results, strict=True):
        assert score.n_tokens == len(result.log_probs)
        assert score.log_prob == pytest.approx(sum(result.log_probs), abs=1e-4)


def _write(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return str(path)


def test_a_target_the_vocabulary_cannot_spell_is_scored_and_said(checkpoint, tmp_path, capfd):
    """A target in a script the vocabulary lacks had been scored through its unknown pieces
    without a word (an Arabic target scored -69.03 against a German model)."""
    translator = Translator.from_checkpoint(str(checkpoint))
    spelled, unknown = score_pairs(translator, ["das buch"] * 2, ["das buch", "مرحبا بالعالم"])
    assert not spelled.unknown and unknown.unknown
    src = _write(tmp_path / "src.txt", ["das buch"] * 3)
    tgt = _write(tmp_path / "tgt.txt", ["das buch", "مرحبا", "日本"])
    args = ["score", "--checkpoint", str(checkpoint), "--src", src, "--tgt", tgt]
    assert main([*args, "--output", str(tmp_path / "scores.tsv")]) == 0
    assert "warning: 2 target(s) hold characters the target vocabulary lacks" in (
        capfd.readouterr().err
    )


def test_score_cli_writes_total_and_per_token_per_pair(checkpoint, tmp_path, capfd):
    src = _write(tmp_path / "src.txt", [*SOURCES, ""])
    tgt = _write(tmp_path / "tgt.txt", [*TARGETS, "das buch"])
    out = tmp_path / "scores.tsv"
    args = ["score", "--checkpoint", str(checkpoint), "--src", src, "--tgt", tgt]
    assert main([*args, "--output", str(out), "--batch-tokens", "12"]) == 0
    assert "1 pair(s) with a blank source" in capfd.readouterr().err
    lines = out.read_text(encoding="utf-8").splitlines()
    expected = score_pairs(Translator.from_checkpoint(str(checkpoint)), SOURCES, TARGETS)
    assert len(lines) == len(SOURCES) + 1 and lines[-1] == "nan\tnan"
    for line, score in zip(lines, expected, strict=False):
        total, per_token = map(float, line.split("\t"))
        assert total == pytest.approx(score.log_prob, abs=1e-4)
        assert per_token == pytest.approx(score.per_token, abs=1e-4)
    assert main(args) == 0  # stdout
    assert capfd.readouterr().out.splitlines() == lines


def test_score_cli_refuses_files_of_different_lengths_in_one_line(
    checkpoint, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(scoring, "CHUNK_PAIRS", 2)  # a pipe's count is known at its end only
    src = _write(tmp_path / "src.txt", SOURCES)
    tgt = _write(tmp_path / "tgt.txt", TARGETS[:3])
    out = tmp_path / "scores.tsv"
    argv = ["score", "--checkpoint", str(checkpoint), "--src", src, "--tgt", tgt]
    assert main([*argv, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    said = f"{src} has 5 lines but {tgt} has 3: scoring reads one target line per source line"
    assert err == f"error: {said}\n"
    assert not out.exists()
    assert main(argv) == 2  # to stdout: refused before any pair is scored and written
    assert capsys.readouterr() == ("", f"error: {said}\n")
    assert main([*argv, "--output", src]) == 2
    assert "is the --src file itself" in capsys.readouterr().err


def test_score_cli_reranks_an_nbest_list_by_log_prob(trained, tmp_path, capsys):
    src = _write(tmp_path / "src.txt", SOURCES[:3])
    nbest = tmp_path / "nbest.txt"
    translate = ["translate", "--checkpoint", str(trained), "--input", src, "--quiet"]
    assert main([*translate, "--output", str(nbest), "--beam-size", "4", "--nbest", "3"]) == 0
    written = nbest.read_text(encoding="utf-8").splitlines()
    reversed_list = _write(tmp_path / "reversed.txt", written[::-1])
    out = tmp_path / "rescored.txt"
    argv = ["score", "--checkpoint", str(trained), "--src", src, "--nbest", reversed_list]
    assert main([*argv, "--output", str(out)]) == 0
    rescored = [line.split(" ||| ") for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(t for _, t, _ in rescored) == sorted(line.split(" ||| ")[1] for line in written)
    assert [int(i) for i, _, _ in rescored] == [2, 2, 2, 1, 1, 1, 0, 0, 0]  # as first seen
    translator = Translator.from_checkpoint(str(trained))
    for i in range(3):
        group = [(text, float(score)) for index, text, score in rescored if int(index) == i]
        assert [s for _, s in group] == sorted((s for _, s in group), reverse=True)
        (expected,) = score_pairs(translator, [SOURCES[i]], [group[0][0]])
        assert group[0][1] == pytest.approx(expected.log_prob, abs=1e-4)


@pytest.mark.parametrize(
    "line, message",
    [
        ("0 ||| no score", "nbest.txt:2: expected `index ||| text ||| score`"),
        ("x ||| a ||| 1.0", "nbest.txt:2: index 'x' is not a whole number"),
        ("1_0 ||| a ||| 1.0", "nbest.txt:2: index '1_0' is not a whole number"),
        ("\u0661 ||| a ||| 1.0", "nbest.txt:2: index '\u0661' is not a whole number"),
        ("5 ||| a ||| 1.0", "nbest.txt:2: index 5 names no source line: the sources have 2"),
        (
            "1 ||| a ||| 1.0\n0 ||| b ||| 1.0",
            "nbest.txt:3: index 0 again after other indices: a list holds each source's "
            "hypotheses on consecutive lines",
        ),
    ],
)
def test_score_cli_names_the_nbest_line_it_cannot_read(checkpoint, tmp_path, capsys, line, message):
    src = _write(tmp_path / "src.txt", SOURCES[:2])
    nbest = _write(tmp_path / "nbest.txt", ["0 ||| das buch ||| -1.0", line])
    argv = ["score", "--checkpoint", str(checkpoint), "--src", src, "--nbest", nbest]
    assert main([*argv, "--output", str(tmp_path / "out.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_rescoring_in_chunks_fetches_each_chunks_sources_in_any_order(
    trained, tmp_path, monkeypatch
):
    """Chunks of two hypotheses: the sources' lines are fetched per chunk, reading on where the
    list's indices ascend and from the start where they go back; the output is the one-chunk
    output, and a source's hypotheses stay together even when they outnumber a chunk."""
    src = _write(tmp_path / "src.txt", SOURCES)
    groups = {4: ["schnee", "schnee schnee", "buch"], 1: ["buch das"], 3: ["hunde zwei", "rad"]}
    groups[0] = ["rad fährt mann ein"]
    lines = [f"{i} ||| {t} ||| 0.0" for i, texts in groups.items() for t in texts]
    nbest = _write(tmp_path / "nbest.txt", lines)
    argv = ["score", "--checkpoint", str(trained), "--src", src, "--nbest", nbest]
    assert main([*argv, "--output", str(tmp_path / "whole.txt")]) == 0
    monkeypatch.setattr(scoring, "CHUNK_PAIRS", 2)
    fetched = []
    fetch = scoring._LinesByIndex.fetch
    monkeypatch.setattr(
        scoring._LinesByIndex,
        "fetch",
        lambda self, indices: fetched.append(fetch(self, indices)) or fetched[-1],
    )
    opened = []
    read = scoring.iter_lines
    monkeypatch.setattr(scoring, "iter_lines", lambda path: opened.append(path) or read(path))
    assert main([*argv, "--output", str(tmp_path / "chunked.txt")]) == 0
    assert fetched == [{4: SOURCES[4]}, {1: SOURCES[1], 3: SOURCES[3]}, {0: SOURCES[0]}]
    assert len(opened) == 1 + 3  # counted, then read from the start for 4, back to 1, back to 0
    chunked = (tmp_path / "chunked.txt").read_text(encoding="utf-8")
    assert chunked == (tmp_path / "whole.txt").read_text(encoding="utf-8")
    assert [line.split(" ||| ")[0] for line in chunked.splitlines()] == list("4441330")


def test_score_cli_reports_its_progress_in_a_log_file(trained, tmp_path, capsys, monkeypatch):
    """Without a terminal, a line per chunk scored (every 0 s here) with the total and the
    time left; pairs for --tgt, sources for --nbest."""
    monkeypatch.setattr("transformer_mt.progress.PROGRESS_SECONDS", 0.0)
    monkeypatch.setattr(scoring, "CHUNK_PAIRS", 2)
    src = _write(tmp_path / "src.txt", SOURCES)
    tgt = _write(tmp_path / "tgt.txt", TARGETS)
    argv = ["score", "--checkpoint", str(trained), "--src", src, "--output", str(tmp_path / "o")]
    assert main([*argv, "--tgt", tgt]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"scored {n}/5 pairs" for n in (2, 4, 5)]
    assert all(", ETA " in line for line in lines)
    nbest = _write(tmp_path / "nbest.txt", [f"{i} ||| {t} ||| 0.0" for i, t in enumerate(TARGETS)])
    assert main([*argv, "--nbest", nbest]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"reranked {n}/5 sources" for n in (2, 4, 5)]


class Done(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def score_from_stdin(checkpoint, capsys):
    """`tmt score ARGS` in this process, its standard input (descriptor 0, which /dev/stdin
    names) a pipe holding `text`: a process of its own took 3 s of importing torch."""

    def run(text: str, *args: str) -> Done:
        read, write = os.pipe()
        os.write(write, text.encode())  # a few lines: within the pipe's buffer
        os.close(write)
        saved = os.dup(0)
        os.dup2(read, 0)
        os.close(read)
        try:
            status = main(["score", "--checkpoint", str(checkpoint), *args])
        finally:
            os.dup2(saved, 0)
            os.close(saved)
        return Done(status, *capsys.readouterr())

    return run


def test_score_cli_reads_a_source_pipe_once(score_from_stdin, tmp_path):
    """A pipe cannot be counted before it is read: scored as it comes, without a total."""
    tgt = _write(tmp_path / "tgt.txt", TARGETS)
    sources = "".join(f"{line}\n" for line in SOURCES)
    done = score_from_stdin(sources, "--src", "/dev/stdin", "--tgt", tgt)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == len(SOURCES)


def test_score_cli_reads_a_target_pipe_given_as_a_dash(score_from_stdin, tmp_path):
    src = _write(tmp_path / "src.txt", SOURCES)
    targets = "".join(f"{line}\n" for line in TARGETS)
    done = score_from_stdin(targets, "--src", src, "--tgt", "-")
    assert done.returncode == 0, done.stderr
    by_name = score_from_stdin(targets, "--src", src, "--tgt", "/dev/stdin")
    assert done.stdout == by_name.stdout and len(done.stdout.splitlines()) == len(SOURCES)


def test_score_cli_reads_stdin_once(checkpoint, capsys):
    twice = ["score", "--checkpoint", str(checkpoint), "--src", "-", "--tgt", "-"]
    assert main(twice) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.endswith(
        "error: --tgt -: stdin is already --src; give one of them a file\n"
    )


def test_score_cli_refuses_an_nbest_list_in_a_pipe(score_from_stdin, tmp_path):
    """Read twice (checked, then scored), a pipe's second reading would find nothing: refused
    in one line."""
    src = _write(tmp_path / "src.txt", SOURCES[:1])
    done = score_from_stdin("0 ||| the book ||| -1.0\n", "--src", src, "--nbest", "/dev/stdin")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.endswith(
        "error: /dev/stdin: a named pipe (FIFO), not a regular file; an n-best list and its "
        "sources are read twice (checked, then scored): give them as files\n"
    )


def test_score_cli_needs_one_of_tgt_and_nbest(checkpoint, capsys):
    with pytest.raises(SystemExit):
        main(["score", "--checkpoint", str(checkpoint), "--src", "s.txt"])
    assert "one of the arguments --tgt --nbest is required" in capsys.readouterr().err


def test_lines_by_index_reads_on_while_indices_ascend(tmp_path, monkeypatch):
    path = _write(tmp_path / "src.txt", SOURCES)
    opened = []
    read = scoring.iter_lines
    monkeypatch.setattr(scoring, "iter_lines", lambda path: opened.append(path) or read(path))
    lines = scoring._LinesByIndex(path)
    assert lines.fetch([2, 0, 2]) == {0: SOURCES[0], 2: SOURCES[2]}
    assert lines.fetch([4, 3]) == {3: SOURCES[3], 4: SOURCES[4]}
    assert len(opened) == 1
    assert lines.fetch([1]) == {1: SOURCES[1]} and len(opened) == 2


def test_score_cli_says_when_the_sources_of_an_nbest_list_are_empty(checkpoint, tmp_path, capsys):
    src = _write(tmp_path / "src.txt", [])
    nbest = _write(tmp_path / "nbest.txt", ["0 ||| das buch ||| -1.0"])
    argv = ["score", "--checkpoint", str(checkpoint), "--src", src, "--nbest", nbest]
    assert main([*argv, "--output", str(tmp_path / "out.txt")]) == 2
    said = "nbest.txt:1: index 0 names no source line: the sources have no lines\n"
    assert capsys.readouterr().err.endswith(said)


def test_marian_moses_and_cdec_nbest_lines_give_their_text_without_the_features(tmp_path):
    lines = [
        "0 ||| a man ||| F0= -1.25 ||| -1.25",  # Marian
        "0 ||| a ||| b ||| -1.0",  # ours, the text holding the separator
        "1 ||| two ||| LM0= -2 TM0= -1 -0.5 ||| -3",  # Moses, a feature of three values
        "1 ||| ends ||| F0= ||| -1",  # a name without a value: text
        "1 ||| 3 ||| 4 ||| -1",  # numbers without a name: text
        "1 ||| cdec ||| LM0=-1.2 TM0=-3 ||| -1",  # cdec and Joshua: name=value tokens
        "1 ||| mixed ||| LM0=-1.2 TM0= -3 -1 ||| -1",
        "1 ||| E=mc2 ||| x=y ||| -1",  # a value that is no number: text
        "1 ||| none |||  ||| -1",  # Moses without features: an empty field
    ]
    nbest = _write(tmp_path / "nbest.txt", lines)
    groups = [(g.index, g.texts) for g in iter_nbest(nbest, 2)]
    assert groups == [
        (0, ["a man", "a ||| b"]),
        (1, ["two", "ends ||| F0=", "3 ||| 4", "cdec", "mixed", "E=mc2 ||| x=y", "none"]),
    ]


def test_a_byte_order_mark_of_an_nbest_list_is_noted_once(checkpoint, tmp_path, caplog):
    """The list is read twice (checked, then scored); the note is said once."""
    src = _write(tmp_path / "src.txt", SOURCES[:2])
    nbest = tmp_path / "nbest.txt"
    nbest.write_text("\ufeff0 ||| das buch ||| -1.0\n1 ||| buch ||| -2.0\n", encoding="utf-8")
    argv = ["score", "--checkpoint", str(checkpoint), "--src", src, "--nbest", str(nbest)]
    assert main([*argv, "--output", str(tmp_path / "out.txt")]) == 0
    notes = [r for r in caplog.records if "starts with a UTF-8 byte order mark" in r.message]
    assert [r.message for r in notes] == [
        f"{nbest}: starts with a UTF-8 byte order mark; it was removed"
    ]
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").startswith("0 ||| das buch ||| ")
