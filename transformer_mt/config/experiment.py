"""ExperimentConfig: one experiment's sections, and the rules that cross them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from transformer_mt.config.data import DataConfig
from transformer_mt.config.decode import DecodeConfig
from transformer_mt.config.errors import ConfigError
from transformer_mt.config.model import ModelConfig
from transformer_mt.config.tokenizer import TokenizerConfig
from transformer_mt.config.train import TrainConfig


@dataclass(frozen=True)
class ExperimentConfig:
    """Every setting of one experiment, a section per part; a YAML file's top-level keys."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def validate(self) -> None:
        for section in (self.model, self.data, self.tokenizer, self.train, self.decode):
            section.validate()
        if self.model.share_embeddings and not self.tokenizer.joint:
            raise ConfigError(
                "model.share_embeddings needs tokenizer.joint: true",
                keys=("model.share_embeddings", "tokenizer.joint"),
            )
        targets = dict.fromkeys(tgt for _, tgt in self.data.directions())
        untagged = [code for code in targets if code not in self.tokenizer.language_tags]
        if len(targets) > 1 and untagged and self.train.init_from is None:
            raise ConfigError(
                f"data.train translates into {', '.join(targets)}: add "
                f"{', '.join(untagged)} to tokenizer.language_tags (the model reads the target "
                "language's tag in front of each source)",
                keys=("data.train", "tokenizer.language_tags"),
            )
        if self.data.streaming and self.tokenizer.bpe_dropout > 0:
            raise ConfigError(
                "tokenizer.bpe_dropout needs data.streaming: false (streamed pairs are "
                "segmented once, as they are read)",
                keys=("tokenizer.bpe_dropout", "data.streaming"),
            )

    def check_positions(self, table_fixed: bool = False) -> None:
        """Refuse a position table too short for the training pairs or for decoding them.

        A training pair takes data.max_len + 1 positions on each side (the source EOS, the
        target BOS). Greedy validation of such a source generates up to max_len(x) =
        floor(decode.max_len_a * |x| + decode.max_len_b) tokens with |x| = data.max_len + 1
        (`search.lengths.max_output_lengths`, the same formula on tensors), one decoder position
        each. Without this check the first validation dies before any checkpoint is written.
        `table_fixed`: the table is a parent's (fine-tuning), so the advice is to shorten
        pairs or decoding, never to grow the table.

        Not part of `validate`: the stored config of a finished run must still load for
        translation, which truncates sources and caps decoding at the table.
        """
        table, pair = self.model.max_positions, self.data.max_len + 1
        if table < pair:
            advice = f"raise model.max_positions to {pair} or lower data.max_len"
            if table_fixed:
                advice = f"lower data.max_len to {table - 1}"
            raise ConfigError(
                f"model.max_positions={table} is below data.max_len + 1 = {pair} (the longest "
                f"training pair plus its EOS or BOS); {advice}",
                keys=("model.max_positions", "data.max_len"),
            )
        decode = self.decode
        longest = max(1, math.floor(decode.max_len_a * pair + decode.max_len_b))
        if table < longest:
            grow = "" if table_fixed else f"raise model.max_positions to {longest} or "
            raise ConfigError(
                f"model.max_positions={table} is below the decoding length of the longest "
                f"training source, decode.max_len_a * (data.max_len + 1) + decode.max_len_b = "
                f"{decode.max_len_a:g} * {pair} + {decode.max_len_b} = {longest}; {grow}lower "
                "decode.max_len_a, decode.max_len_b or data.max_len",
                keys=(
                    "model.max_positions",
                    "decode.max_len_a",
                    "data.max_len",
                    "decode.max_len_b",
                ),
            )
