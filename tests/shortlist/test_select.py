"""Search with a shortlist: a batch searches as each of its sentences alone through the full
projection masked to that sentence's ids (the slow twin), the full vocabulary as a shortlist
changes nothing, and the ids a search must produce (EOS, a forced prefix, constraints) stay
allowed."""

import dataclasses

import pytest
import torch

from transformer_mt.artifacts import load_for_inference
from transformer_mt.data.tokenizer import EOS_ID
from transformer_mt.errors import TmtError
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.translator import Translator
from transformer_mt.search import SearchOptions, search
from transformer_mt.shortlist.select import Shortlist
from transformer_mt.shortlist.vmap import write_vmap

from ..conftest import pad_rows
from .conftest import target_pieces, write_always

SENTENCES = ["ein mann fährt rad", "das buch und der hund", "hund", "kinder spielen im park"]


class MaskedTwin:
    """The model with its full projection's log-probs renormalised over `ids`: what a
    shortlist's search must equal, computed the slow way."""

    def __init__(self, model, ids: torch.Tensor):
        self.model, self.ids = model, ids
        self.encode, self.source_rows = model.encode, model.source_rows

    def decode_step(self, *args):
        log_probs, cache = self.model.decode_step(*args)
        mask = torch.full_like(log_probs, float("-inf"))
        mask[:, self.ids] = 0.0
        return torch.log_softmax(log_probs + mask, dim=-1), cache


def _batch(bundle):
    src_ids = pad_rows([bundle.src_tokenizer.encode(s) + [EOS_ID] for s in SENTENCES])
    return src_ids, bundle.model.src_mask(src_ids)


def _shortlist(bundle, per_source: int) -> Shortlist:
    """Each source id lists the `per_source` target ids after it (a deterministic subset)."""
    vocab = bundle.tgt_tokenizer.vocab_size
    table = (torch.arange(vocab)[:, None] + torch.arange(1, per_source + 1)) % vocab
    output = bundle.model.output_projection
    return Shortlist(table, torch.tensor([5, 6]), output.weight.detach(), None)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_batch_with_a_shortlist_searches_as_each_sentence_alone_masked(
    reversing_checkpoint, beam_size
):
    """The union of the batch's ids is scored, each sentence renormalised over its own: the
    result is each sentence's search alone through the full projection masked to its ids."""
    bundle = load_for_inference(reversing_checkpoint)
    decode = dataclasses.replace(bundle.config.decode, beam_size=beam_size, n_best=beam_size)
    src_ids, src_mask = _batch(bundle)
    shortlist = _shortlist(bundle, per_source=4)
    allowed = shortlist.allowed(src_ids, [[EOS_ID]] * len(SENTENCES))
    vocab = bundle.tgt_tokenizer.vocab_size
    assert all(10 < row.sum() < vocab for row in allowed)  # real restrictions
    assert len({tuple(row.tolist()) for row in allowed}) == len(SENTENCES)  # all different
    fast = search(bundle.model, src_ids, src_mask, decode, SearchOptions(vocabulary=shortlist))
    for i, mine in enumerate(fast):
        ids = allowed[i].nonzero().squeeze(1)
        one, one_mask = src_ids[i : i + 1], src_mask[i : i + 1]
        (twin,) = search(MaskedTwin(bundle.model, ids), one, one_mask, decode, SearchOptions())
        assert [h.tokens for h in mine.hypotheses] == [h.tokens for h in twin.hypotheses]
        for a, b in zip(mine.hypotheses, twin.hypotheses, strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-5)
            assert set(a.tokens) <= set(ids.tolist())


@pytest.mark.parametrize("quantize", [None, "int8"])
def test_the_whole_vocabulary_as_a_shortlist_changes_no_translation(
    reversing_checkpoint, tmp_path, quantize
):
    """To the score. With int8 layers the shortlist scores with the projection's float32 rows
    (its int8 copy cannot be cut by rows), so it is compared with the int8 model whose
    projection is float32: against the int8 projection, scores move by the rounding, and a
    close call between two words can go the other way."""
    path = write_always(tmp_path / "all.vmap", target_pieces(reversing_checkpoint))
    load = dict(beam_size=3, n_best=3, lines=LineSettings(split_sentences=False), quantize=quantize)
    plain = Translator.from_checkpoint(str(reversing_checkpoint), **load)
    listed = Translator.from_checkpoint(str(reversing_checkpoint), shortlist=path, **load)
    if quantize is not None:
        floats = Translator.from_checkpoint(
            str(reversing_checkpoint), **(load | {"quantize": None})
        )
        plain.model.output_projection = floats.model.output_projection
    for a, b in zip(plain.translate(SENTENCES), listed.translate(SENTENCES), strict=True):
        assert a.texts == b.texts
        assert a.scores == pytest.approx(b.scores, abs=1e-5)


def test_a_forced_prefix_and_constraints_outside_the_list_are_still_produced(
    reversing_checkpoint,
):
    bundle = load_for_inference(reversing_checkpoint)
    decode = dataclasses.replace(bundle.config.decode, beam_size=2)
    src_ids, src_mask = _batch(bundle)
    shortlist = _shortlist(bundle, per_source=1)
    listed = set(shortlist.allowed(src_ids, [[EOS_ID]] * 4).any(dim=0).nonzero()[:, 0].tolist())
    outside = [i for i in range(4, bundle.tgt_tokenizer.vocab_size) if i not in listed]
    prefix, phrase = outside[0], outside[1]
    options = SearchOptions(vocabulary=shortlist)
    n = len(SENTENCES)
    found = search(bundle.model, src_ids, src_mask, decode, options, [[prefix]] * n)
    assert all(r.best.tokens[0] == prefix for r in found)
    found = search(bundle.model, src_ids, src_mask, decode, options, None, [[[phrase]]] * n)
    assert all(phrase in r.best.tokens for r in found)


def test_a_shortlist_of_another_model_is_named_by_file_line_and_piece(
    reversing_checkpoint, tmp_path
):
    path = tmp_path / "other.vmap"
    write_vmap(path, [], {"▁Zeppelinfahrt": ["▁airship"]})
    with pytest.raises(TmtError, match=rf"^{path}:2: source piece '▁Zeppelinfahrt' is not"):
        Translator.from_checkpoint(str(reversing_checkpoint), shortlist=path)


@pytest.mark.parametrize("text", ["", "\t\n", "\n\n"], ids=["empty", "no-pieces", "blank"])
def test_a_shortlist_listing_no_target_piece_is_refused(reversing_checkpoint, tmp_path, text):
    """Every sentence could produce only the unknown piece: each line came out as ' ⁇ '."""
    path = tmp_path / "empty.vmap"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TmtError, match=rf"^{path}: lists no target pieces, so every sentence"):
        Translator.from_checkpoint(str(reversing_checkpoint), shortlist=path)


def test_a_target_piece_listed_many_times_counts_once(reversing_checkpoint, tmp_path):
    """A line repeating one piece a million times asked for a table of source vocabulary x a
    million ids (an out-of-memory error blaming the model); repeats change nothing."""
    bundle = load_for_inference(reversing_checkpoint)
    pieces = target_pieces(reversing_checkpoint)
    source = bundle.src_tokenizer.id_to_piece(bundle.src_tokenizer.encode("hund")[0])
    plain, repeated = tmp_path / "plain.vmap", tmp_path / "repeated.vmap"
    write_vmap(plain, pieces[:3], {source: pieces[4:8]})
    write_vmap(repeated, pieces[:3] * 3, {source: pieces[4:8] + [pieces[5]] * 1_000_000})
    output = bundle.model.output_projection
    args = (bundle.src_tokenizer, bundle.tgt_tokenizer, output.weight.detach(), None)
    once, many = Shortlist.load(plain, *args), Shortlist.load(repeated, *args)
    assert many.table.shape == once.table.shape == (bundle.src_tokenizer.vocab_size, 4)
    assert torch.equal(many.table, once.table) and torch.equal(many.always, once.always)
