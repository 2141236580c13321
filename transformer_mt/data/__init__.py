"""Raw parallel text in, batches of token ids out.

    fetch.py      download or copy a known corpus as plain text (scripts/get_data.py)
    dataset.py    check and read text / TSV / JSONL / hub corpora into `src`/`tgt`; clean training
    mixing.py     several training corpora as one stream, mixed by weight (data.train as a list)
    tokenizer.py  SentencePiece model: train, load, encode, decode; special ids
    encoding.py   encode a corpus once and cache the ids as Arrow
    batching.py   token-budget batches, Batch with masks, the resumable BatchIterator
    streaming.py  data.streaming: train read lazily, tokenized on the fly, batched by chunks
    pipeline.py   prepare_data: config + tokenizers -> training batches and validation set

Import the modules themselves; this package file stays empty so that `fetch` does not pull in
torch and `datasets`.
"""
