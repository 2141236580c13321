"""Language codes are checked where the config is loaded, by one rule: a code names data files
(`{prefix}.{code}`) and a tag piece (`>>code<<`), so a blank one or a path is refused naming its
key, not found missing as a file once training has started."""

import pytest

from transformer_mt.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("data.src_lang=''", "data.src_lang"),
        ("data.tgt_lang=../../etc/passwd", "data.tgt_lang"),
        ("data.src_lang='de '", "data.src_lang"),
        ("data.train=[{path: c/train, src_lang: ''}]", "data.train[0].src_lang"),
        (
            "data.train=[{path: c/train}, {path: c/more, tgt_lang: a/b, src_lang: en}]",
            "data.train[1].tgt_lang",
        ),
        ("tokenizer.language_tags=[en, ../de]", "tokenizer.language_tags"),
    ],
)
def test_a_language_code_that_is_no_code_is_refused_by_its_key(tmp_path, setting, key):
    config = tmp_path / "c.yaml"
    config.write_text("train: {}\n")
    with pytest.raises(ConfigError) as info:
        load_config(config, [setting])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(key), message
    assert "a language code is letters, digits, '_' and '-'" in message


@pytest.mark.parametrize("code", ["en", "pt-BR", "fra_Latn", "zh_Hant"])
def test_language_codes_of_every_form_in_use_load(tmp_path, code):
    config = tmp_path / "c.yaml"
    config.write_text("train: {}\n")
    loaded = load_config(config, [f"data.tgt_lang={code}", f"tokenizer.language_tags=[{code}]"])
    assert loaded.data.tgt_lang == code


def test_training_warns_about_a_code_that_names_no_language(caplog):
    """`data.src_lang: french` trained without a word, its sentences split by English rules
    and its BLEU tokenised by 13a."""
    from transformer_mt.config import DataConfig
    from transformer_mt.training.run import _note_unknown_languages

    with caplog.at_level("WARNING"):
        _note_unknown_languages(DataConfig(src_lang="french", tgt_lang="en"))
        _note_unknown_languages(DataConfig(src_lang="pt-BR", tgt_lang="deu_Latn"))
    assert [r.getMessage() for r in caplog.records] == [
        "data language 'french' names no one language (ISO 639: fr, fra, pt-BR): sentences are "
        "split by English rules and BLEU is tokenised by 13a"
    ]
