#!/usr/bin/python3
"""Regenerates the committed MDS fixtures in tests/data/mds/, or checks them.

    /usr/bin/python3 models/make_mds_fixtures.py            # rewrite every fixture
    /usr/bin/python3 models/make_mds_fixtures.py --check    # regenerate into a temp dir and compare

Small Mosaic Data Shard datasets written by foundry's own writer (models/mds.py) for the C++
reader's tests: token ids 0..255 (vocabulary 256), 16 tokens a sample unless a fixture says
otherwise, each from its own numpy default_rng seed, so regeneration reproduces the bytes (for the
same zstd library). tests/data/mds/README.md lists them. Each fixture folder holds its split
folder(s) (train/, mpt_tiny also val/) and expected.json:
    columns       {name: encoding} as given to the writer
    token_column  the column holding the tokens, or null (text_only)
    samples       the train split's token column, one list per sample, as written
    val_samples   mpt_tiny only: the same for val/
    other         where there are other columns: {name: [the value of each train sample]}
mpt_tiny also holds train.bin and val.bin: the same tokens as llm.c token files
(models/text_tokens.py write_llmc) in windows of 17: each sample's 16 tokens, then the next
sample's first token (0 after the last), so window k starts with sample k. Its tokens are the
bytes of /usr/share/common-licenses/GPL-3, read only when regenerating.
"""

import argparse
import filecmp
import json
import os
import shutil
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from models.mds import encode_sample, make_config, write_mds  # noqa: E402
from models.text_tokens import write_llmc  # noqa: E402

OUT = os.path.join(REPO, "tests", "data", "mds")
SEQ = 16
TEXT = "/usr/share/common-licenses/GPL-3"
WORDS = ["shard", "token", "sample", "zstd", "index", "offset", "column", "stream", "mosaic", "train"]


def token_rows(seed, count, lengths=None):
    """count rows of token ids 0..255; lengths: {row: length} where a row is not SEQ long."""
    rng = np.random.default_rng(seed)
    lengths = lengths or {}
    return [rng.integers(0, 256, lengths.get(i, SEQ)).tolist() for i in range(count)]


def mixed_columns():
    """int32_zstd: tokens plus the columns a reader must skip."""
    rng = np.random.default_rng(101)
    rows = token_rows(1, 48)
    samples = []
    for i, row in enumerate(rows):
        words = [WORDS[w] for w in rng.integers(0, len(WORDS), rng.integers(1, 6))]
        samples.append({"tokens": np.array(row, np.int32), "id": 1000 + i, "text": " ".join(words),
                        "meta": {"n": i, "tags": words[:2], "ok": bool(i % 2)},
                        "score": np.float32(rng.standard_normal())})
    other = {"id": [s["id"] for s in samples], "text": [s["text"] for s in samples],
             "meta": [s["meta"] for s in samples], "score": [float(s["score"]) for s in samples]}
    return rows, samples, other


def gpl_tokens():
    """mpt_tiny's train (64 samples) and val (16 samples) rows: consecutive bytes of GPL-3."""
    data = np.frombuffer(open(TEXT, "rb").read(), np.uint8)[:80 * SEQ].astype(np.int32)
    rows = data.reshape(80, SEQ).tolist()
    return rows[:64], rows[64:]


def windows(rows):
    """llm.c tokens: each row, then the next row's first token (0 after the last)."""
    out = []
    for k, row in enumerate(rows):
        out += row + [rows[k + 1][0] if k + 1 < len(rows) else 0]
    return out


def shard_count(head, sizes, limit):
    """How many shards the writer makes of samples of `sizes` (each with its offset) under limit."""
    count, size = 1, head
    for s in sizes:
        if size > head and size + s > limit:
            count, size = count + 1, head
        size += s
    return count


def size_limit_for(columns, samples, shards, compression=None, hashes=()):
    """The smallest size_limit with which the writer splits samples into exactly `shards` shards."""
    parsed = make_config(columns, compression, hashes, None)[0]
    sizes = [len(encode_sample(parsed, i, s)) + 4 for i, s in enumerate(samples)]
    limit = sum(sizes) // shards
    while True:
        config = make_config(columns, compression, hashes, limit)[1]
        count = shard_count(8 + len(json.dumps(config, sort_keys=True)), sizes, limit)
        if count <= shards:
            assert count == shards, f"no size_limit gives {shards} shards"
            return limit
        limit += 1


def token_split(rows, make, shards=1, column="tokens"):
    """(samples, token rows, shard count) of a split whose only column holds the tokens."""
    return [{column: make(r)} for r in rows], rows, shards


def fixtures():
    """{name: fixture}: columns, token column, {split: (samples, rows, shards)}, write options."""
    def arr(dtype):
        return lambda row: np.array(row, dtype)

    rows, mixed, other = mixed_columns()
    train, val = gpl_tokens()
    texts = [" ".join(WORDS[i:i + 3]) for i in range(8)]
    int32 = {"tokens": "ndarray:int32"}
    zstd_sha = {"compression": "zstd", "hashes": ("sha1", "xxh64")}
    int64_bytes = token_split(token_rows(3, 24), lambda r: np.array(r, "<i8").tobytes())
    static = token_split(token_rows(4, 24), arr(np.uint32), column="input_ids")
    long_rows = token_rows(6, 24, {i: 20 for i in range(24)})
    return {
        "int32_zstd": dict(columns=dict(int32, id="int", text="str", meta="json", score="float32"),
                           splits={"train": (mixed, rows, 4)}, other=other, options=zstd_sha),
        "uint16_none": dict(columns={"tokens": "ndarray:uint16"},
                            splits={"train": token_split(token_rows(2, 40), arr(np.uint16), 2)}),
        "bytes_int64": dict(columns={"tokens": "bytes"}, splits={"train": int64_bytes}),
        "input_ids_static": dict(columns={"input_ids": "ndarray:uint32:16"}, token_column="input_ids",
                                 splits={"train": static},
                                 options={"compression": "zstd:7", "hashes": ("md5", "sha256", "xxh3_64")}),
        "ndarray_dynamic": dict(columns={"tokens": "ndarray"},
                                splits={"train": token_split(token_rows(5, 24), arr(np.int64))},
                                options={"hashes": ("xxh128", "xxh32")}),
        "long_samples": dict(columns=int32, splits={"train": token_split(long_rows, arr(np.int32))}),
        "short_samples": dict(columns=int32,
                              splits={"train": token_split(token_rows(7, 24, {5: 12}), arr(np.int32))}),
        "text_only": dict(columns={"text": "str"}, token_column=None, other={"text": texts},
                          splits={"train": ([{"text": t} for t in texts], [], 1)}),
        "float_tokens": dict(columns={"tokens": "ndarray:float32"},
                             splits={"train": token_split(token_rows(8, 8), arr(np.float32))}),
        "mpt_tiny": dict(columns=int32, splits={"train": token_split(train, arr(np.int32), 3),
                                                "val": token_split(val, arr(np.int32))},
                         options=zstd_sha, bins={"train.bin": windows(train), "val.bin": windows(val)}),
    }


def write_fixture(dest, fx):
    """Writes one fixture folder: its splits, expected.json and any llm.c files."""
    options = fx.get("options", {})
    token_column = fx.get("token_column", "tokens")
    expected = {"columns": fx["columns"], "token_column": token_column}
    for split, (samples, rows, shards) in fx["splits"].items():
        limit = size_limit_for(fx["columns"], samples, shards, **options) if shards > 1 else 1 << 26
        index = write_mds(os.path.join(dest, split), fx["columns"], samples, size_limit=limit, **options)
        assert len(index["shards"]) == shards, f"{dest}/{split}: {len(index['shards'])} shards"
        expected["samples" if split == "train" else split + "_samples"] = rows
    if "other" in fx:
        expected["other"] = fx["other"]
    with open(os.path.join(dest, "expected.json"), "w") as f:
        json.dump(expected, f, sort_keys=True)
        f.write("\n")
    for name, tokens in fx.get("bins", {}).items():
        write_llmc(os.path.join(dest, name), tokens)


def differences(a, b):
    """Paths under a and b that differ (present in one only, or other bytes)."""
    cmp = filecmp.dircmp(a, b)
    out = [os.path.join(a, p) for p in cmp.left_only] + [os.path.join(b, p) for p in cmp.right_only]
    out += [os.path.join(a, p) for p in cmp.common_files
            if not filecmp.cmp(os.path.join(a, p), os.path.join(b, p), shallow=False)]
    for sub in cmp.common_dirs:
        out += differences(os.path.join(a, sub), os.path.join(b, sub))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="regenerate into a temp dir and compare with tests/data/mds")
    a = p.parse_args()
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for name, fx in fixtures().items():
            dest = os.path.join(tmp if a.check else OUT, name)
            shutil.rmtree(dest, ignore_errors=True)
            os.makedirs(dest)
            write_fixture(dest, fx)
            if not a.check:
                print(f"wrote {os.path.relpath(dest, REPO)}")
                continue
            committed = os.path.join(OUT, name)
            diff = differences(committed, dest) if os.path.isdir(committed) else [committed]
            print(f"{name}: " + ("same" if not diff else "differs: " + ", ".join(diff)))
            failed = failed or bool(diff)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
