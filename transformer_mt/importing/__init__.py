"""`tmt import`: a public pretrained model as a checkpoint of ours, which every other command
(translate, evaluate, serve, attention, average, export, fine-tuning) takes as it takes one
trained here.

    source.py   a local Hugging Face model directory, or a hub name fetched through
                huggingface_hub's cache (online only)
    marian.py   OPUS-MT / `MarianMTModel`: weights (inference/hf_marian.py), the two
                SentencePiece models with vocab.json's numbering, the special ids and the
                `>>xxx<<` language tags
    m2m100.py   NLLB-200 and M2M100: weights (inference/hf_m2m100.py), the SentencePiece model
                with the tokenizer's own numbering, language codes on both sides
    parts.py    what the readers share: `ImportedModel`, a SentencePiece model numbered by the
                model's table, the ids never generated
    model_files.py  each file checked before it is opened (a regular file that can be read,
                never a FIFO), JSON read strictly
    values.py   every value read from config.json, generation_config.json,
                tokenizer_config.json and the vocabularies: type, range, ids within the model
    weights.py  the weights file transformers reads, checked (whole, safe: weights_only=True,
                shapes that fit the config), and nothing left for transformers to make up
    convert.py  which converter reads a directory, and the checkpoint it writes

What a model needs and our model cannot compute is refused by the config key and its value
(`hf_marian.UnsupportedConfig`), never converted approximately; a damaged or malformed
directory is refused by the file and key, so that every checkpoint written loads.
"""
