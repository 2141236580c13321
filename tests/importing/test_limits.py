"""The tables of what each export format can express, and the one check that reads them."""

import dataclasses

import pytest

from transformer_mt.config import ModelConfig
from transformer_mt.errors import TmtError
from transformer_mt.interop.export_ct2 import CT2
from transformer_mt.interop.hf_m2m100 import m2m100_limits
from transformer_mt.interop.hf_marian import MARIAN
from transformer_mt.interop.limits import check_expressible

TABLES = {"marian": MARIAN, "m2m100": m2m100_limits(pad_id=1), "ct2": CT2}
FIELDS = {field.name for field in dataclasses.fields(ModelConfig)}


@pytest.mark.parametrize("name", TABLES)
def test_every_limit_names_a_model_config_field_and_says_why(name):
    for field, limit in TABLES[name].limits.items():
        assert field in FIELDS, field
        assert limit.why


def test_our_defaults_are_marian_and_ctranslate2():
    check_expressible(MARIAN, ModelConfig())
    check_expressible(CT2, ModelConfig())


def test_nllb_options_are_m2m100():
    nllb = ModelConfig(pre_norm=True, positions="sinusoidal_fairseq", position_offset=2)
    check_expressible(m2m100_limits(pad_id=1), nllb)
    with pytest.raises(TmtError, match=r"position_offset=2 \(.* pad id \+ 1 = 1\)$"):
        check_expressible(m2m100_limits(pad_id=0), nllb)


def test_every_field_a_format_cannot_hold_is_named_in_table_order():
    cfg = ModelConfig(pre_norm=True, n_heads=8, n_kv_heads=2, attention="mla")
    with pytest.raises(TmtError) as err:
        check_expressible(MARIAN, cfg)
    assert str(err.value) == (
        "cannot map to Hugging Face Marian: model.pre_norm=true (Marian is post-norm); "
        "model.n_kv_heads=2 (Marian has one key/value head per query head); "
        "model.attention=mla (Marian has standard attention only)"
    )
    with pytest.raises(TmtError) as err:
        check_expressible(CT2, cfg)
    assert str(err.value) == "cannot export to CTranslate2: model.attention=mla not supported"
