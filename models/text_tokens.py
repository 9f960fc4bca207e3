"""Byte-level token files from any text, in llm.c's format, for the shipped tiny models.

The tiny MPT (models/fixtures/mpt_tiny) has a vocabulary of 256: one token per byte. This writes
a text file's bytes as an llm.c token file (a header of 256 int32: magic 20240520, version 1,
token count; then the tokens as uint16, as llm.c's dev/data/data_common.py write_datafile does),
split into a training file and a held-out file:

    /usr/bin/python3 models/text_tokens.py /usr/share/common-licenses/GPL-3 -o out/gpl
    # -> out/gpl.train.bin (90 % of the bytes), out/gpl.val.bin (the last 10 %)

foundry-run reads them with --data / --eval-data (it recognises the header).
"""

import argparse
import os
import struct
import sys

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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("text", help="any file; its bytes are the tokens")
    p.add_argument("-o", "--out", required=True, help="PREFIX: writes PREFIX.train.bin and PREFIX.val.bin")
    p.add_argument("--val-fraction", type=float, default=0.1)
    a = p.parse_args()
    data = open(a.text, "rb").read()
    if len(data) < 100:
        sys.exit(f"text_tokens.py: error: {a.text} holds {len(data)} bytes; give a longer text")
    split = int(len(data) * (1 - a.val_fraction))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    write_llmc(a.out + ".train.bin", list(data[:split]))
    write_llmc(a.out + ".val.bin", list(data[split:]))
    print(f"wrote {a.out}.train.bin ({split} tokens) and {a.out}.val.bin ({len(data) - split} tokens)")


if __name__ == "__main__":
    main()
