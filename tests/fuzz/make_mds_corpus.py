#!/usr/bin/python3
"""Writes the seed corpus of the MDS reader fuzzer (tests/fuzz/mds_corpus/, < 100 KB in all).

    /usr/bin/python3 tests/fuzz/make_mds_corpus.py

Each seed is packed as mds_fuzz.cc reads it: [4 bytes: n, little-endian][n bytes: index.json]
[a shard file]. From each split of tests/data/mds (FIXTURE/train, mpt_tiny/val): its index.json with
its first shard file (FIXTURE.seed) and, for a split of several shards, the index cut to its first
entry with the same shard (FIXTURE.first.seed: a split the fuzzer can open and read whole). For a
zstd split these are written with the compressed shard, and again with the shard decompressed
(FIXTURE.raw.seed, FIXTURE.first.raw.seed: the raw file streaming writes beside the zip). The output depends only on
the fixtures; reproducers of fixed findings are added by hand as crash-*.seed and kept.
"""

import json
import os
import struct
import sys

import zstandard

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "tests", "data", "mds")
OUT = os.path.join(HERE, "mds_corpus")
MAX = 100 * 1024


def frame(index_text, shard):
    data = index_text.encode()
    return struct.pack("<I", len(data)) + data + shard


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if name.endswith(".seed") and not name.startswith("crash-"):
            os.remove(os.path.join(OUT, name))
    splits = []
    for fixture in sorted(os.listdir(FIXTURES)):
        for split in ("train", "val"):
            d = os.path.join(FIXTURES, fixture, split)
            if os.path.isfile(os.path.join(d, "index.json")):
                splits.append((fixture if split == "train" else f"{fixture}_{split}", d))
    total = 0
    for label, d in splits:
        with open(os.path.join(d, "index.json")) as f:
            text = f.read()
        index = json.loads(text)
        first = index["shards"][0]
        zip_data = first.get("zip_data")
        shard_name = zip_data["basename"] if zip_data else first["raw_data"]["basename"]
        with open(os.path.join(d, shard_name), "rb") as f:
            shard = f.read()
        cut = json.dumps(dict(index, shards=[first]), sort_keys=True)
        several = len(index["shards"]) > 1
        seeds = {f"{label}.seed": frame(text, shard)}
        if several:
            seeds[f"{label}.first.seed"] = frame(cut, shard)
        if zip_data:
            raw = zstandard.ZstdDecompressor().decompress(shard)
            assert len(raw) == first["raw_data"]["bytes"], label
            seeds[f"{label}.raw.seed"] = frame(text, raw)
            if several:
                seeds[f"{label}.first.raw.seed"] = frame(cut, raw)
        for name, data in seeds.items():
            with open(os.path.join(OUT, name), "wb") as f:
                f.write(data)
            total += len(data)
    for name in os.listdir(OUT):
        if name.startswith("crash-"):
            total += os.path.getsize(os.path.join(OUT, name))
    print(f"{len(os.listdir(OUT))} seeds, {total} bytes in {OUT}")
    if total >= MAX:
        sys.exit(f"the corpus is {total} bytes, over {MAX}")


if __name__ == "__main__":
    main()
