"""Language tags written in training text are taken out, as translation takes them out of a
typed line: a corpus tagged in advance (OPUS-MT style) trains with the framing's one tag per
source, a tag inside a target never becomes a label, the back-translation tag of a tagged
source stays, and a warning counts what was taken out."""

import itertools
import logging

import numpy as np
import pytest

from tests.corpora import slice_lines
from transformer_mt.config import (
    DataConfig,
    ExperimentConfig,
    TokenizerConfig,
    TrainConfig,
    TrainSource,
)
from transformer_mt.data.dataset import column_texts, load_split
from transformer_mt.data.pipeline import prepare_data, train_tokenizers_for
from transformer_mt.data.specials import BACK_TRANSLATION_TAG, own_specials
from transformer_mt.data.token_column import TokenColumn
from transformer_mt.data.typed_tags import TypedTags

PRE_TAGGED = 60  # German lines written with ">>en<< " in front
TAGGED_TARGETS = range(100, 110)  # English lines with ">>de<<" inside


def written(lang: str) -> list[str]:
    lines = slice_lines("train", lang)[:300]
    if lang == "de":
        return [f">>en<< {line}" if i < PRE_TAGGED else line for i, line in enumerate(lines)]
    return [
        line.replace(" ", " >>de<< ", 1) if i in TAGGED_TARGETS else line
        for i, line in enumerate(lines)
    ]


@pytest.fixture(scope="module")
def pretagged(tmp_path_factory):
    """de->en, and the same text tagged for back-translation, its German pre-tagged, with
    the run's tokenizers and specials."""
    root = tmp_path_factory.mktemp("pretagged")
    for lang in ("de", "en"):
        (root / f"train.{lang}").write_text("\n".join(written(lang)) + "\n")
    sources = (TrainSource(str(root / "train")), TrainSource(str(root / "train"), tagged=True))
    data = DataConfig(
        train=sources, valid=str(root / "train"), test=None, cache_dir=str(root / "cache")
    )
    tokenizer = TokenizerConfig(vocab_size=500, language_tags=("en", "de"))
    pair = train_tokenizers_for(data, tokenizer, root / "run")
    return data, tokenizer, pair, own_specials(pair.tgt, tokenizer.language_tags)


@pytest.mark.parametrize(
    "changes",
    [{}, {"streaming": True, "workers": 0, "shuffle_buffer": 1000}, {"bpe_dropout": 0.1}],
    ids=["in-memory", "streamed", "bpe-dropout"],
)
def test_batches_hold_only_the_framings_tag(pretagged, changes, caplog):
    data, tokenizer, pair, specials = pretagged
    dropout = changes.pop("bpe_dropout", 0.0)
    config = ExperimentConfig(
        data=DataConfig(**{**data.__dict__, **changes}),
        tokenizer=TokenizerConfig(**{**tokenizer.__dict__, "bpe_dropout": dropout}),
        train=TrainConfig(max_tokens=1024),
    )
    with caplog.at_level(logging.WARNING):
        prepared = prepare_data(config, pair.src, pair.tgt, specials)
        batches = list(itertools.islice(prepared.train, 40))
    tags = list(specials.language_tags.values())
    back_translation = pair.src.piece_id(BACK_TRANSLATION_TAG)
    src = rows([b.src_ids for b in batches])
    assert (src[:, 0] == specials.language_tags["en"]).all()  # the framing's own
    assert not np.isin(src[:, 1:], tags).any()
    assert not np.isin(rows([b.tgt_out_ids for b in batches]), tags).any()
    # The tagged source keeps <BT>, after the "▁" that SentencePiece starts a line with.
    assert set(np.nonzero(src == back_translation)[1].tolist()) == {2}
    assert f"{written_tags(data, 'train'):,} language tags written in the text" in caplog.text


def rows(tensors) -> np.ndarray:
    """The rows of padded batches in one array, padded to the longest."""
    width = max(t.shape[1] for t in tensors)
    return np.concatenate([np.pad(t.numpy(), ((0, 0), (0, width - t.shape[1]))) for t in tensors])


def written_tags(data: DataConfig, split: str) -> int:
    """The tags written in the text of `split` as it is read (mixed by weight)."""
    text = load_split(data, split)
    lines = [*column_texts(text, "src"), *column_texts(text, "tgt")]
    return sum(line.count(">>en<<") + line.count(">>de<<") for line in lines)


def test_validation_text_is_taken_out_too(pretagged, caplog):
    data, tokenizer, pair, specials = pretagged
    config = ExperimentConfig(data=data, tokenizer=tokenizer, train=TrainConfig(max_tokens=1024))
    with caplog.at_level(logging.WARNING):
        prepared = prepare_data(config, pair.src, pair.tgt, specials)
    assert written_tags(data, "valid") == PRE_TAGGED + len(TAGGED_TARGETS)
    assert f"data.valid {data.valid}: 70 language tags written in the text taken out" in (
        caplog.text
    )
    src = rows([b.src_ids for b in prepared.valid_batches])
    assert not np.isin(src[:, 1:], list(specials.language_tags.values())).any()


def test_a_boundary_ending_a_row_stays_before_a_tag_starting_the_next():
    """Rows are taken apart one by one in one flat array: "▁" is taken out with the tag
    right after it in its own row only."""
    tags = TypedTags(np.array([5]), boundary=4)
    column = TokenColumn.from_lists([[9, 4], [5, 7, 4, 5, 8], [4, 5]])
    stripped, found = column.without_tags(tags)
    assert [stripped[i].tolist() for i in range(len(stripped))] == [[9, 4], [7, 8], []]
    assert found == 3
    assert tags.kept([4, 5, 7]) == [2]


class _Pieces:
    """A vocabulary as TypedTags reads one: pieces by id (1: unknown)."""

    def __init__(self, pieces: list[str]):
        self.pieces = pieces

    def piece_id(self, piece: str) -> int:
        return self.pieces.index(piece) if piece in self.pieces else 1

    def id_to_piece(self, token_id: int) -> str:
        return self.pieces[token_id]


def test_a_target_vocabulary_of_its_own_finds_each_tag_by_its_piece():
    """The ids of `specials` are the source vocabulary's: the target's id 5 is another piece
    ("▁Haus"), which had been taken out of every target as a tag."""
    from transformer_mt.data.specials import SpecialTokens
    from transformer_mt.data.typed_tags import training_tags

    specials = SpecialTokens(language_tags={"de": 5, "en": 6})
    head = ["<pad>", "<unk>", "<s>", "</s>", "\u2581"]
    src = _Pieces([*head, ">>de<<", ">>en<<", "\u2581Mann"])
    tgt = _Pieces([*head, "\u2581Haus", "\u2581man", "\u2581dog", "x", ">>de<<"])
    source, target = training_tags((src, tgt), specials)
    assert source.ids.tolist() == [5, 6] and target.ids.tolist() == [9]
