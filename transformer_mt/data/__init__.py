"""Raw parallel text in, batches of token ids out.

    fetch.py         a known corpus by name as plain text (`tmt data`): download or
                     copy from a mirror; hub corpora via hub_export.py; the stand-in is standin.py
    corpus_files.py  the text files a fetched corpus is written as: checked, atomic, resumable
    hub_export.py    a `datasets` hub corpus (WMT14) streamed to text files, train shuffled on disk
    standin.py       the offline WMT14 stand-in: Multi30k en-de repeated to any size
    dataset.py       the config's corpora (text / TSV / JSONL files, hub splits) as src/tgt,
                     whole or streamed
    hub.py           a `datasets` hub translation split (online, or a local folder), whole or
                     streamed
    cleaning.py      which training pairs are kept (empty, too long, length ratio), and a report
    readers.py       local corpus files read line by line, each bad line named
    mixing.py        several training corpora as one stream, mixed by weight (data.train as a list)
    tokenizer.py     SentencePiece model: load, encode, decode; our special ids; an imported
                     model's numbering of pieces (PieceTable)
    tokenizer_training.py  a run's SentencePiece models trained (or reused from the cache)
    tokenizer_adopt.py  a SentencePiece model trained elsewhere, renumbered to our special ids
    specials.py      a model's special ids and language tags, and how they frame a pair
    token_column.py  rows of token ids stored flat (numpy and pyarrow only)
    encoding.py      encode a corpus once and cache the ids as Arrow
    typed_tags.py    language tags written in a line's text taken out of its ids (training and
                     translation alike)
    batching.py      token-budget batches, Batch with masks
    cursor.py        the resumable BatchIterator: one rank's batches, epoch after epoch
    streaming.py     data.streaming: train read lazily, tokenized on the fly, batched by chunks
    stream_workers.py  its reader processes leave signals to the trainer and end with it
    pipeline.py      prepare_data: config + tokenizers -> training batches and validation set

Import the modules themselves; this package file stays empty so that `fetch` does not pull in
torch and `datasets`.
"""
