"""From a checkpoint to output: translations and attention maps.

    translator.py      Translator: the one text -> translation pipeline (split, truncate,
                       batch, search, detokenize, join) that `tmt translate`, validation
                       BLEU, `tmt attention` and scripts/run_experiment.py call
    translation.py     Translation: one line's n-best texts and scores
    line_settings.py   LineSettings: alignments, languages, sentence splitting of a Translator
    encoding.py        LineEncoding: sources, forced prefixes and phrases as ids, cut to the
                       position table; lines cut and typed tags taken out, counted
    writing.py         TargetWriter: search results as text (tags dropped, unknown pieces
                       copied, alignments), for the translator and the server alike
    unknowns.py        unknown pieces replaced by the source pieces they attend to
    running.py         how a loaded model runs: packed or int8 layers, shortlist, search options
    requests.py        Texts: the texts and each one's prefix, direction, constraints, glossary
    sentences.py       a line cut into sentences and joined back, whitespace kept verbatim
    paragraphs.py      BLEU on test sentences joined n to a line
    cross_attention.py cross-attention of forced passes in batches; word alignment from it
    dropped.py         the dropped-content check: flags on a sentence's translation
    checked.py         translations checked, flagged sentences retried in parts, reports
    glossary.py        glossary and constraints files; source terms found in a sentence
    constrained.py     target phrases as ids, what cannot fit, the beam each sentence needs
    stream.py          lines in, lines out for `tmt translate`: UTF-8 input, n-best format,
                       chunks (progress: transformer_mt/progress.py)
    quantize.py        dynamic int8 linear layers for CPU translation
    attention_maps.py  `tmt attention`: heatmaps of one sentence pair's attention weights

Exports and the Hugging Face weight mappings live in `transformer_mt.interop`.

Checkpoints are read through `transformer_mt.artifacts`; nothing here imports `training/`.
Import the modules themselves: this file imports nothing, so one of them loads without the rest.
"""
