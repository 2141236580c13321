"""`tmt export --format ctranslate2 --shortlist` of imported models: refused where CTranslate2
would misread the model's special ids in a reused Translator's later calls (an OPUS-MT
model's decoder starts from pad, its last id; NLLB forces a language code that follows every
piece), and the CTranslate2 behaviour that refusal rests on."""

import pytest

from tests.conftest import without_notes
from tests.corpora import slice_lines
from tests.importing.builders import build_marian, build_nllb
from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.interop.export_ct2 import build_spec
from transformer_mt.shortlist.vmap import Vocabularies, write_vmap

transformers = pytest.importorskip("transformers")

LINES = slice_lines("test2016", "de")[:12]


@pytest.fixture(scope="module", params=["marian", "nllb"])
def imported(request, tmp_path_factory):
    """(checkpoint of an imported model, a shortlist for it, the refusal's id and piece)."""
    root = tmp_path_factory.mktemp("shortlist")
    build = build_marian if request.param == "marian" else build_nllb
    build(root / "hf", **({"separate": True} if request.param == "marian" else {}))
    checkpoint = root / "imported.pt"
    assert main(["import", str(root / "hf"), "--out", str(checkpoint)]) == 0
    bundle = load_for_inference(checkpoint)
    shortlist = write_shortlist(bundle, root / "model.vmap")
    specials = bundle.specials
    if request.param == "marian":
        blamed = ("decoder start", specials.bos)
    else:  # the first of the language codes, which the target prefix forces
        blamed = ("target language code", min(specials.language_tags.values()))
    return checkpoint, shortlist, blamed


def write_shortlist(bundle, path):
    """Five ordinary target pieces for each source piece of LINES, a different five for each,
    and three allowed everywhere: each sentence's candidates differ."""
    src, tgt = bundle.src_tokenizer, bundle.tgt_tokenizer
    specials = bundle.specials
    taken = {specials.pad, specials.unk, specials.bos, specials.eos}
    taken |= set(specials.language_tags.values())
    ordinary = [tgt.id_to_piece(i) for i in range(tgt.vocab_size) if i not in taken][:150]
    ordinary = [piece for piece in ordinary if not piece.startswith("<")]
    sources = dict.fromkeys(src.id_to_piece(i) for line in LINES for i in src.encode(line))
    lists = {piece: ordinary[5 * k % 140 : 5 * k % 140 + 5] for k, piece in enumerate(sources)}
    write_vmap(path, ordinary[:3], lists, Vocabularies.of(src, tgt))
    return path


def test_a_shortlist_ctranslate2_would_misread_is_refused(imported, tmp_path, capsys):
    checkpoint, shortlist, (role, token_id) = imported
    piece = load_for_inference(checkpoint).tgt_tokenizer.id_to_piece(token_id)
    out = tmp_path / "ct2"
    args = ["export", "--format", "ctranslate2", str(checkpoint), str(out)]
    assert main([*args, "--shortlist", str(shortlist)]) == 2
    assert without_notes(capsys.readouterr().err).strip() == (
        f"error: --shortlist {shortlist}: CTranslate2 keeps the place a target id had among the "
        f"pieces of a Translator's first use_vmap call, and this model's {role} id {token_id} "
        f"({piece}) follows pieces only some calls hold, so later calls would misread it; "
        "export this model without a shortlist"
    )
    assert not out.exists() and not list(tmp_path.iterdir())
    assert main(args) == 0  # without it, the model exports


def test_ctranslate2_misreads_those_ids_in_a_reused_translator(imported, tmp_path):
    """Why the export refuses: the same model and shortlist built past the refusal translate
    otherwise, or fail, in a Translator's later calls than in a new Translator. When this
    fails, CTranslate2 has stopped keeping its first call's places and the refusal can go."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    checkpoint, shortlist, _ = imported
    bundle = load_for_inference(checkpoint)
    spec = build_spec(bundle.model, bundle.src_tokenizer, bundle.tgt_tokenizer, bundle.specials)
    spec.register_vocabulary_mapping(str(shortlist))
    (tmp_path / "ct2").mkdir()
    spec.save(str(tmp_path / "ct2"))
    src, tgt = bundle.src_tokenizer, bundle.tgt_tokenizer
    tags = {code: tgt.id_to_piece(i) for code, i in bundle.specials.language_tags.items()}
    source_tag = [tags["deu_Latn"]] if tags else []
    options = dict(beam_size=1, max_decoding_length=10, use_vmap=True)
    if tags:
        options["target_prefix"] = [[tags["eng_Latn"]]]

    def translate(engine, line):
        pieces = source_tag + [src.id_to_piece(i) for i in src.encode(line)]
        try:
            return engine.translate_batch([pieces], **options)[0].hypotheses[0]
        except IndexError:  # vector::_M_range_check
            return None

    reused = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    differ = 0
    for line in LINES:
        fresh = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
        differ += translate(reused, line) != translate(fresh, line)
    assert differ > 0
