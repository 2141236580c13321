"""Shortlists (vocabulary selection): the target pieces a batch of sources may produce, so
that a search step scores those few hundred ids instead of the whole vocabulary.

    corpus.py    the tokenised corpus, read once and held on disk a chunk a file
    lexicon.py   IBM Model 1 translation probabilities from a tokenised parallel corpus
    vmap.py      the file: CTranslate2's vocabulary map format, read and written here only
    build.py     `tmt shortlist`: a checkpoint's corpus -> its vocabulary map file
    select.py    at search time: a batch's target ids and the projection restricted to them

Production CPU translation (Marian's lexical shortlists in Bergamot, CTranslate2's
`use_vmap`) does the same: a student's output projection is a large part of its decoding
time (docs/distillation.md measures how large, and what a shortlist costs in BLEU).
"""
