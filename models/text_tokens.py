"""Byte-level token files from any text, in llm.c's format or as MDS, for the shipped tiny models.

The tiny MPT (models/fixtures/mpt_tiny) has a vocabulary of 256: one token per byte. This writes
a text file's bytes as an llm.c token file (a header of 256 int32: magic 20240520, version 1,
token count; then the tokens as uint16, as llm.c's dev/data/data_common.py write_datafile does),
split into a training file and a held-out file:

    /usr/bin/python3 models/text_tokens.py /usr/share/common-licenses/GPL-3 -o out/gpl
    # -> out/gpl.train.bin (90 % of the bytes), out/gpl.val.bin (the last 10 %)

foundry-run reads them with --data / --eval-data (it recognises the header).

--mds DIR writes the same two splits as Mosaic Data Shard datasets DIR/train and DIR/val
(models/mds.py), as llm-foundry's convert_dataset_hf.py --concat_tokens N writes them: each
sample is a column `tokens` (ndarray:int32) of N consecutive tokens (--concat-tokens, default
16), cut from the split in order, the tail shorter than N dropped; zstd, hashes sha1 and xxh64.
Give -o, --mds or both:

    /usr/bin/python3 models/text_tokens.py /usr/share/common-licenses/GPL-3 --mds out/gpl_mds
    # -> out/gpl_mds/train, out/gpl_mds/val (index.json + shard.00000.mds.zstd ...)
"""

import argparse
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models.mds import write_mds  # noqa: E402

MAGIC = 20240520
VERSION = 1  # uint16 tokens


def write_llmc(path, tokens):
    header = [0] * 256
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))
    os.replace(tmp, path)


def write_mds_tokens(out_dir, tokens, n):
    """tokens as samples of n consecutive tokens (the tail shorter than n dropped); the count."""
    count = len(tokens) // n
    chunks = np.frombuffer(bytes(tokens), np.uint8)[:count * n].astype(np.int32).reshape(count, n)
    write_mds(out_dir, {"tokens": "ndarray:int32"}, ({"tokens": c} for c in chunks),
              compression="zstd", hashes=("sha1", "xxh64"))
    return count


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("text", help="any file; its bytes are the tokens")
    p.add_argument("-o", "--out", help="PREFIX: writes PREFIX.train.bin and PREFIX.val.bin")
    p.add_argument("--mds", metavar="DIR", help="writes DIR/train and DIR/val as MDS datasets")
    p.add_argument("--concat-tokens", type=int, default=16, metavar="N",
                   help="tokens per MDS sample (default 16)")
    p.add_argument("--val-fraction", type=float, default=0.1)
    a = p.parse_args()
    if not a.out and not a.mds:
        p.error("give -o PREFIX (llm.c .bin files), --mds DIR (MDS datasets) or both")
    if a.concat_tokens < 1:
        p.error("--concat-tokens must be at least 1")
    data = open(a.text, "rb").read()
    if len(data) < 100:
        sys.exit(f"text_tokens.py: error: {a.text} holds {len(data)} bytes; give a longer text")
    split = int(len(data) * (1 - a.val_fraction))
    shortest = min(split, len(data) - split)
    if a.mds and shortest < a.concat_tokens:
        sys.exit(f"text_tokens.py: error: a split of {shortest} tokens holds no sample of "
                 f"--concat-tokens {a.concat_tokens}")
    if a.out:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        write_llmc(a.out + ".train.bin", list(data[:split]))
        write_llmc(a.out + ".val.bin", list(data[split:]))
        print(f"wrote {a.out}.train.bin ({split} tokens) and {a.out}.val.bin ({len(data) - split} tokens)")
    if a.mds:
        for name, tokens in (("train", data[:split]), ("val", data[split:])):
            out = os.path.join(a.mds, name)
            try:
                count = write_mds_tokens(out, tokens, a.concat_tokens)
            except (FileExistsError, ValueError) as e:
                sys.exit(f"text_tokens.py: error: {e}")
            print(f"wrote {out} ({count} samples of {a.concat_tokens} tokens)")


if __name__ == "__main__":
    main()
