"""Other toolkits' models and ours: `tmt import` (a public pretrained model as a checkpoint of
ours, which every other command takes as it takes one trained here) and `tmt export` (a
checkpoint as a Hugging Face directory or a CTranslate2 model), with the weight mappings both
directions share.

    limits.py          which `ModelConfig` values a format can express: one table per target
                       format (`hf_marian.MARIAN`, `hf_m2m100.m2m100_limits`,
                       `export_ct2.CT2`), read by the one check, `check_expressible`
    hf_bart.py         what the Marian and M2M100 mappings share (BART family): layer names,
                       config keys and the rules a config must meet, `ConvertedModel`
    hf_marian.py       weight mapping to and from Hugging Face `MarianMTModel` (OPUS-MT)
    hf_m2m100.py       weight mapping to and from `M2M100ForConditionalGeneration` (NLLB-200)
    export.py          `tmt export`: the format by name; Hugging Face Marian or M2M100 with
                       their tokenizers
    export_ct2.py      `tmt export --format ctranslate2`: CTranslate2's spec from our weights
    import_model.py    `tmt import`: which reader takes a directory, the checkpoint it writes
    import_source.py   a local Hugging Face model directory, or a hub name fetched through
                       huggingface_hub's cache (online only)
    import_marian.py   OPUS-MT directories: weights (hf_marian.py), the two SentencePiece models
                       with vocab.json's numbering, the special ids and `>>xxx<<` language tags
    import_m2m100.py   NLLB-200 and M2M100 directories: weights (hf_m2m100.py), the
                       SentencePiece model with the tokenizer's own numbering, language codes
    import_parts.py    what the readers share: `ImportedModel`, a SentencePiece model numbered
                       by the model's table
    import_generation.py  the model's own `generate` settings (beams, length penalty and
                       limits, the ids never generated) as the checkpoint's decode section
    import_files.py    each file checked before it is opened (a regular file that can be read,
                       never a FIFO), JSON read strictly
    import_values.py   every value read from config.json, generation_config.json,
                       tokenizer_config.json and the vocabularies: type, range, ids in the model
    import_weights.py  the weights file transformers reads, checked (whole, safe:
                       weights_only=True, shapes that fit the config), nothing left to make up

What a model needs and our model cannot compute is refused by the config key and its value
(`hf_bart.UnsupportedConfig`), never converted approximately; a damaged or malformed
directory is refused by the file and key, so that every checkpoint written loads. An option of
ours that a target format cannot hold is refused by name (`limits.check_expressible`) before
anything is written. Checkpoints are read through `transformer_mt.artifacts`; nothing here
imports training, search, serving or the command line.
"""
