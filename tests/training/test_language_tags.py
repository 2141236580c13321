"""A model trained here with language tags (`tokenizer.language_tags`): the tags are pieces of
their own, the target language's tag starts every source, the checkpoint records them, and
`--tgt-lang` chooses among them; no tag is ever produced."""

import pytest

from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.config import ConfigError
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.translator import Translator
from transformer_mt.training.run import run_training

from .conftest import write_config, write_corpus


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    root = tmp_path_factory.mktemp("tags")
    write_corpus(root, n_train=120)
    config = write_config(root, train="max_steps: 6", tokenizer="language_tags: [en, de, fr]")
    assert run_training(str(config), str(root / "run"), []) == 0
    return root / "run" / "checkpoints" / "last.pt"


def test_tags_are_pieces_of_their_own_and_frame_every_source(tagged):
    bundle = load_for_inference(tagged)
    tags = bundle.specials.language_tags
    assert set(tags) == {"en", "de", "fr"} and bundle.specials.source_tag == "target"
    for code, tag in tags.items():
        assert tag in bundle.src_tokenizer.encode(f">>{code}<< der hund")  # never split
        assert tag in bundle.specials.never  # never produced
    translator = Translator.from_checkpoint(str(tagged), beam_size=1)  # data.tgt_lang: en
    assert translator.encoding.source_ids("der hund")[0] == tags["en"]
    french = Translator.from_checkpoint(str(tagged), beam_size=1, lines=LineSettings(tgt_lang="fr"))
    assert french.encoding.source_ids("der hund")[0] == tags["fr"]
    outputs = [t.texts[0] for t in translator.translate(["der hund", "die katze sieht"])]
    assert not any(">>" in text for text in outputs)


def test_a_language_the_model_lacks_is_named(tagged, tmp_path, capsys):
    source = tmp_path / "in.de"
    source.write_text("der hund\n", "utf-8")
    args = ["translate", "--checkpoint", str(tagged), "--input", str(source), "--tgt-lang", "cs"]
    assert main(args) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: --tgt-lang cs: the model has no such language; it knows de, en, fr"
    )


def test_tags_need_one_vocabulary(tmp_path):
    write_corpus(tmp_path, n_train=20)
    config = write_config(tmp_path, tokenizer="language_tags: [en, de], joint: false")
    with pytest.raises(ConfigError, match="tokenizer.language_tags needs tokenizer.joint: true"):
        run_training(str(config), str(tmp_path / "run"), [])
