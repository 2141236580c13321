"""Search results written as target text: the last step of `Translator` and of the server.

A hypothesis' ids become text through the target tokenizer, after the language tags forced in
front of it are dropped; its unknown pieces are written as the source pieces they attend to
where `decode.replace_unk` asks (`inference.unknowns`), and with alignments on, the best one
gets its (source, target) subword pairs (`inference.cross_attention`). The server writes its
finished and streamed hypotheses with the same `TargetWriter` as `tmt translate`, so that the
two give the same text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformer_mt.data.batching import SourceBatch
from transformer_mt.data.specials import SpecialTokens
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.inference.cross_attention import alignment_pairs
from transformer_mt.inference.encoding import LineEncoding
from transformer_mt.inference.languages import Direction
from transformer_mt.inference.translation import Translation
from transformer_mt.inference.unknowns import copied_pieces
from transformer_mt.model import Seq2SeqTransformer
from transformer_mt.search import SearchResult


@dataclass(frozen=True)
class TargetWriter:
    """Writes a model's search results as text.

    Args:
        model: what attends to the source (unknown pieces, alignments).
        tokenizer: the target tokenizer.
        encoding: how a sentence was encoded (its source pieces, for unknown pieces).
        specials: the model's special ids.
        default: the direction of results given none.
        alignment_layer: the decoder layer whose cross-attention aligns (None: no alignments;
            unknown pieces then read the last layer).
    """

    model: Seq2SeqTransformer
    tokenizer: Tokenizer
    encoding: LineEncoding
    specials: SpecialTokens
    default: Direction
    alignment_layer: int | None = None

    def batch(
        self,
        batch: SourceBatch,
        found: Sequence[SearchResult],
        sentences: Sequence[tuple[str | None, Direction]],
    ) -> list[Translation]:
        """The translations of a searched batch's rows (in the batch's order), each with its
        source and direction (`translation`), aligned when alignments are on."""
        translations = []
        for row, (result, (sentence, direction)) in enumerate(zip(found, sentences, strict=True)):
            translation = self.translation(result, direction, sentence)
            if self.alignment_layer is not None:
                src_ids = batch.src_ids[row, batch.src_mask[row].view(-1)]  # (S,), with EOS
                translation.alignment = alignment_pairs(
                    self.model,
                    src_ids,
                    result.best.tokens,
                    self.alignment_layer,
                    self.specials.bos,
                    source_tags=len(direction.source_prefix),
                    target_tags=len(direction.target_prefix),
                )
            translations.append(translation)
        return translations

    def translation(
        self, result: SearchResult, direction: Direction | None = None, source: str | None = None
    ) -> Translation:
        """A search result's hypotheses as target text, with their scores; `direction`: the
        one they were searched in (None: the default). `source`: the sentence searched, whose
        pieces replace the unknown pieces of the hypotheses (`decode.replace_unk`); None:
        they stay ⁇."""
        direction = direction or self.default
        hypotheses = [h.tokens for h in result.hypotheses]
        copied: list[dict[int, str]] = [{} for _ in hypotheses]
        # The source is encoded again only for a result that holds an unknown piece.
        if source is not None and any(self.specials.unk in tokens for tokens in hypotheses):
            copied = copied_pieces(
                self.model,
                [*self.encoding.source_ids(source, direction, count=False), self.specials.eos],
                self.encoding.source_pieces(source, direction),
                hypotheses,
                self.specials.unk,
                self.specials.bos,
                -1 if self.alignment_layer is None else self.alignment_layer,
                (len(direction.source_prefix), len(direction.target_prefix)),
            )
        return Translation(
            [self.text(t, direction, c) for t, c in zip(hypotheses, copied, strict=True)],
            [h.score for h in result.hypotheses],
        )

    def text(
        self,
        tokens: Sequence[int],
        direction: Direction | None = None,
        copied: dict[int, str] | None = None,
    ) -> str:
        """The target text of output `tokens`, without the language tags `direction` (None:
        the default) forced in front; `copied`: pieces written instead of unknown ones, by
        position after the tags (`translation`)."""
        direction = direction or self.default
        return self.tokenizer.decode(tokens[len(direction.target_prefix) :], copied)
