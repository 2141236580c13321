"""Cross-attention of forced passes in batches: each pair's weights as if it went alone, and the
alignment read from them."""

import torch

from transformer_mt.inference.cross_attention import alignment_pairs, best_sources, cross_attention
from transformer_mt.inference.translator import Translator


def pairs(translator):
    sources = ["ein mann", "zwei hunde spielen im schnee", "das buch", "eine frau liest"]
    targets = ["mann ein rad", "", "buch das buch das buch", "liest"]
    eos = translator.specials.eos
    src = [[*translator.encoding.source_ids(text), eos] for text in sources]
    return src, [translator.encoding.prefix_ids(text) for text in targets]


def test_a_batch_gives_each_pair_the_weights_it_gets_alone(checkpoint):
    translator = Translator.from_checkpoint(str(checkpoint))
    model, bos = translator.model, translator.specials.bos
    src, tgt = pairs(translator)
    together = cross_attention(model, src, tgt, -1, bos)
    budgeted = cross_attention(model, src, tgt, -1, bos, max_tokens=8)
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        (alone,) = cross_attention(model, [s], [t], -1, bos)
        assert alone.shape == (len(t), len(s))
        torch.testing.assert_close(together[i], alone, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(budgeted[i], alone, rtol=1e-5, atol=1e-6)
        if t:  # rows are attention distributions over the source
            torch.testing.assert_close(alone.sum(-1), torch.ones(len(t)))


def test_alignment_pairs_are_the_best_sources_of_the_weights(checkpoint):
    translator = Translator.from_checkpoint(str(checkpoint))
    model, bos = translator.model, translator.specials.bos
    src, tgt = pairs(translator)
    for s, t in zip(src, tgt, strict=True):
        (weights,) = cross_attention(model, [s], [t], 0, bos)
        assert alignment_pairs(model, torch.tensor(s), t, 0, bos) == best_sources(weights)


def test_best_sources_skip_tags_and_the_eos():
    # 3 target tokens (1 tag) x 5 source tokens (1 tag, 3 words, EOS): each row's largest
    # weight sits on a tag or the EOS, the best word elsewhere.
    weights = torch.tensor(
        [
            [0.9, 0.0, 0.0, 0.1, 0.0],
            [0.5, 0.1, 0.3, 0.0, 0.1],
            [0.0, 0.2, 0.0, 0.1, 0.7],
        ]
    )
    assert best_sources(weights, source_tags=1, target_tags=1) == [(1, 0), (0, 1)]
    assert best_sources(torch.ones(2, 1)) == [(0, 0), (0, 1)]  # only the EOS: chosen
