"""Sequence-level knowledge distillation (Kim & Rush, 2016): a teacher translates a training
corpus with beam search, and a smaller student trains on the result.

    manifest.py   what a run directory distills (teacher, corpus, decode settings, chunk size),
                  so that a rerun resumes the same work or is refused
    filtering.py  the rules that drop bad teacher translations (empty, copies, lengths)
    job.py        the resumable translation in chunks, and the corpus assembled from them

The teacher translates through the one `Translator`; the student is an ordinary training run
whose `data.train` names the corpus written here (docs/distillation.md).
"""
