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
                model's table, the ids never generated, JSON files read with errors named
    convert.py  which converter reads a directory, and the checkpoint it writes

What a model needs and our model cannot compute is refused by the config key and its value
(`hf_marian.UnsupportedConfig`), never converted approximately.
"""
