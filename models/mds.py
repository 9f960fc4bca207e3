"""Mosaic Data Shard (MDS) datasets: foundry's own writer of the format.

MDS is mosaicml-streaming's shard format, the one llm-foundry's convert_dataset_hf.py writes and
its StreamingTextDataset reads. foundry reads it in C++; this writer, written from the format's
description, makes the test fixtures (models/make_mds_fixtures.py) and turns token files into MDS
(models/text_tokens.py --mds):

    from models.mds import write_mds
    write_mds("out/train", {"tokens": "ndarray:int32"}, ({"tokens": a} for a in arrays),
              compression="zstd", hashes=("sha1", "xxh64"))

The format (version 2), all little-endian. A split is a folder with index.json
({"version": 2, "shards": [...]}, json.dump with sort_keys) and shard files shard.00000.mds, ...
(with zstd compression only shard.00000.mds.zstd is written). Each index entry holds the shard's
config (column_encodings, column_names, column_sizes, compression, format "mds", hashes,
size_limit, version 2), its sample count, and raw_data / zip_data: {basename, bytes, hashes} of
the uncompressed and the compressed bytes. A shard: uint32 sample count n; uint32 offsets[n + 1]
from the start of the file (the last one is the file size); the config as sorted-key JSON; then
the samples. A sample: a uint32 size for each variable-size column, then each column's bytes;
columns are sorted by name. Encodings: bytes, str (UTF-8), json (json.dumps text), int (int64),
the scalars uint8..uint64, int8..int64, float16..float64, and ndarray in three forms:
ndarray:DTYPE:D0,D1,.. (the values only: fixed size), ndarray:DTYPE (a byte (ndim << 2) | k, then
the shape as uint8/16/32/64 for k = 0..3, then the values) and ndarray (a value-dtype code byte
first, then as ndarray:DTYPE). A shard closes before a sample would make it larger than
size_limit bytes (it always holds at least one sample).
"""

import hashlib
import json
import os
import shutil
import struct

import numpy as np
import xxhash
import zstandard

SCALARS = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
           "float16", "float32", "float64")
# The dtype byte of the dynamic `ndarray` encoding.
VALUE_CODES = {"uint8": 8, "int8": 9, "uint16": 16, "int16": 17, "float16": 18, "uint32": 32,
               "int32": 33, "float32": 34, "uint64": 64, "int64": 65, "float64": 66}
SHAPE_TYPES = ("uint8", "uint16", "uint32", "uint64")  # the low two bits of the shape byte
HASHES = {
    "sha1": lambda d: hashlib.sha1(d).hexdigest(),
    "sha256": lambda d: hashlib.sha256(d).hexdigest(),
    "md5": lambda d: hashlib.md5(d).hexdigest(),
    "xxh32": lambda d: xxhash.xxh32(d).hexdigest(),
    "xxh64": lambda d: xxhash.xxh64(d).hexdigest(),
    "xxh3_64": lambda d: xxhash.xxh3_64(d).hexdigest(),
    "xxh128": lambda d: xxhash.xxh128(d).hexdigest(),
}
MAX_SHARD_BYTES = (1 << 32) - 1  # offsets are uint32


def parse_encoding(name, encoding):
    """(kind, dtype, shape, fixed size or None) of a column encoding; ValueError if unknown."""
    bad = ValueError(f"column {name!r}: unsupported encoding {encoding!r}")
    if encoding in ("bytes", "str", "json"):
        return encoding, None, None, None
    if encoding == "int":
        return "scalar", "int64", None, 8
    if encoding in SCALARS:
        return "scalar", encoding, None, np.dtype(encoding).itemsize
    parts = encoding.split(":") if isinstance(encoding, str) else []
    if not parts or parts[0] != "ndarray" or len(parts) > 3:
        raise bad
    if len(parts) == 1:
        return "ndarray", None, None, None
    if parts[1] not in VALUE_CODES:
        raise bad
    if len(parts) == 2:
        return "ndarray", parts[1], None, None
    dims = parts[2].split(",")
    if not all(d.isascii() and d.isdigit() and int(d) >= 1 for d in dims):
        raise bad
    shape = tuple(int(d) for d in dims)
    return "ndarray", parts[1], shape, int(np.prod(shape)) * np.dtype(parts[1]).itemsize


def encode_scalar(name, dtype, value):
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"column {name!r}: {dtype} expects a number, not a bool")
    if dtype.startswith("float"):
        if not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"column {name!r}: {dtype} expects a number, not {type(value).__name__}")
        return np.array(value, "<" + np.dtype(dtype).str[1:]).tobytes()
    if not isinstance(value, (int, np.integer)):
        raise ValueError(f"column {name!r}: {dtype} expects an integer, not {type(value).__name__}")
    info = np.iinfo(dtype)
    if not info.min <= int(value) <= info.max:
        raise ValueError(f"column {name!r}: {value} is out of the range of {dtype}")
    return np.array(int(value), "<" + np.dtype(dtype).str[1:]).tobytes()


def encode_ndarray(name, dtype, shape, value):
    """The bytes of an ndarray column: [dtype code] [shape byte, shape] values."""
    if not isinstance(value, np.ndarray) or value.dtype.name not in VALUE_CODES:
        kind = value.dtype.name if isinstance(value, np.ndarray) else type(value).__name__
        want = dtype or "a supported dtype"
        raise ValueError(f"column {name!r}: expects a NumPy array of {want}, not {kind}")
    if dtype is not None and value.dtype.name != dtype:
        raise ValueError(f"column {name!r}: expects dtype {dtype}, not {value.dtype.name}")
    if value.size == 0 or not 1 <= value.ndim <= 63:
        raise ValueError(f"column {name!r}: expects a non-empty array of 1 to 63 dimensions, "
                         f"not shape {value.shape}")
    if shape is not None and value.shape != shape:
        raise ValueError(f"column {name!r}: expects shape {shape}, not {value.shape}")
    head = b"" if dtype is not None else bytes([VALUE_CODES[value.dtype.name]])
    if shape is None:
        code = next(k for k, t in enumerate(SHAPE_TYPES) if max(value.shape) <= np.iinfo(t).max)
        head += bytes([(value.ndim << 2) | code])
        head += np.array(value.shape, "<" + np.dtype(SHAPE_TYPES[code]).str[1:]).tobytes()
    return head + np.asarray(value, "<" + value.dtype.str[1:]).tobytes()


def encode_value(name, parsed, value):
    """The bytes of one column's value; ValueError naming the column if it does not fit."""
    kind, dtype, shape, _ = parsed
    if kind == "bytes":
        if not isinstance(value, (bytes, bytearray)):
            raise ValueError(f"column {name!r}: bytes expects bytes, not {type(value).__name__}")
        return bytes(value)
    if kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"column {name!r}: str expects a str, not {type(value).__name__}")
        return value.encode("utf-8")
    if kind == "json":
        try:
            return json.dumps(value).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise ValueError(f"column {name!r}: not JSON-serialisable: {e}") from None
    if kind == "scalar":
        return encode_scalar(name, dtype, value)
    return encode_ndarray(name, dtype, shape, value)


def encode_sample(columns, index, sample):
    """One sample's bytes: the sizes of the variable-size columns, then every column's bytes."""
    if not isinstance(sample, dict) or set(sample) != set(columns):
        got = sorted(sample) if isinstance(sample, dict) else type(sample).__name__
        raise ValueError(f"sample {index}: expects the columns {sorted(columns)}, got {got}")
    sizes, parts = [], []
    for name, parsed in columns.items():
        data = encode_value(name, parsed, sample[name])
        if parsed[3] is None:
            sizes.append(len(data))
        parts.append(data)
    return struct.pack("<%dI" % len(sizes), *sizes) + b"".join(parts)


def shard_bytes(config_text, samples):
    """A shard file: sample count, offsets, config, samples."""
    n = len(samples)
    offsets = [4 + 4 * (n + 1) + len(config_text)]
    for s in samples:
        offsets.append(offsets[-1] + len(s))
    if offsets[-1] > MAX_SHARD_BYTES:
        raise ValueError(f"a shard of {offsets[-1]} bytes does not fit uint32 offsets; give a size_limit")
    return struct.pack("<I%dI" % (n + 1), n, *offsets) + config_text + b"".join(samples)


def file_info(basename, data, hashes):
    return {"basename": basename, "bytes": len(data), "hashes": {a: HASHES[a](data) for a in hashes}}


def parse_options(compression, hashes, size_limit):
    """The zstd level (None: no compression) and the sorted hash list; ValueError if invalid."""
    levels = dict({"zstd": 3}, **{"zstd:%d" % i: i for i in range(1, 23)})
    if compression is not None and compression not in levels:
        raise ValueError(f"compression is None, 'zstd' or 'zstd:LEVEL' (1..22), not {compression!r}")
    level = levels.get(compression)
    unknown = [h for h in hashes if h not in HASHES]
    if unknown:
        raise ValueError(f"unsupported hash {unknown[0]!r}; supported: {', '.join(sorted(HASHES))}")
    if size_limit is not None and not (isinstance(size_limit, int) and 0 < size_limit <= MAX_SHARD_BYTES):
        raise ValueError(f"size_limit is None or a number of bytes from 1 to 2**32 - 1, not {size_limit!r}")
    return level, sorted(set(hashes))


class _ShardWriter:
    """Writes the shards of one split into a folder and collects their index entries."""

    def __init__(self, folder, config, level):
        self.folder, self.config, self.level = folder, config, level
        self.config_text = json.dumps(config, sort_keys=True).encode("utf-8")
        self.shards, self.samples = [], []
        self.size = 4 + 4 + len(self.config_text)  # count, offsets[0] and the config

    def add(self, data):
        limit = self.config["size_limit"]
        if self.samples and limit is not None and self.size + len(data) + 4 > limit:
            self.flush()
        self.samples.append(data)
        self.size += len(data) + 4

    def flush(self):
        raw = shard_bytes(self.config_text, self.samples)
        basename = "shard.%05d.mds" % len(self.shards)
        entry = dict(self.config, samples=len(self.samples), zip_data=None,
                     raw_data=file_info(basename, raw, self.config["hashes"]))
        data = raw
        if self.level is not None:
            data = zstandard.ZstdCompressor(level=self.level).compress(raw)
            basename += ".zstd"
            entry["zip_data"] = file_info(basename, data, self.config["hashes"])
        with open(os.path.join(self.folder, basename), "wb") as f:
            f.write(data)
        self.shards.append(entry)
        self.samples = []
        self.size = 4 + 4 + len(self.config_text)


def make_config(columns, compression, hashes, size_limit):
    """The parsed columns (by name), the shard config and the zstd level; ValueError if invalid."""
    if not columns or not all(isinstance(c, str) and c for c in columns):
        raise ValueError("columns: give at least one column, each named by a non-empty str")
    parsed = {name: parse_encoding(name, columns[name]) for name in sorted(columns)}
    level, hashes = parse_options(compression, hashes, size_limit)
    config = {"column_encodings": [columns[c] for c in parsed], "column_names": list(parsed),
              "column_sizes": [p[3] for p in parsed.values()], "compression": compression,
              "format": "mds", "hashes": hashes, "size_limit": size_limit, "version": 2}
    return parsed, config, level


def write_mds(out_dir, columns, samples, compression=None, hashes=(), size_limit=1 << 26):
    """Writes samples (dicts {column: value}) as an MDS split in out_dir; returns the index.

    All is written into a sibling folder first, which is then renamed to out_dir; an out_dir that
    exists and is not empty is refused (FileExistsError). Invalid columns, options or values raise
    a one-line ValueError naming the column (or the option), and leave nothing behind.
    """
    out_dir = os.path.normpath(out_dir)
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise FileExistsError(f"{out_dir} exists and is not an empty folder")
    parsed, config, level = make_config(columns, compression, hashes, size_limit)
    tmp = "%s.tmp-%d" % (out_dir, os.getpid())
    os.makedirs(tmp)
    try:
        writer = _ShardWriter(tmp, config, level)
        for i, sample in enumerate(samples):
            writer.add(encode_sample(parsed, i, sample))
        if writer.samples:
            writer.flush()
        index = {"version": 2, "shards": writer.shards}
        with open(os.path.join(tmp, "index.json"), "w") as f:
            json.dump(index, f, sort_keys=True)
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return index
