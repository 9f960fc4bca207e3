#!/usr/bin/python3
"""foundry's MDS fixtures against mosaicml-streaming's own reader and writer (outside CI).

    /usr/bin/python3 bench/mds_streaming_check.py --streaming STREAMING_CHECKOUT --scratch DIR
    (bench/mds_streaming_check.sh runs it in a scratch folder of its own)

STREAMING_CHECKOUT is a source checkout of mosaicml/streaming (the folder holding streaming/);
nothing is installed from it. For every fixture of tests/data/mds (models/make_mds_fixtures.py):

(a) Read: each split is read by streaming's own code, with the fixture folder as the `remote`
    and a fresh scratch folder as the `local` cache, so that every shard is "downloaded" (copied),
    hash-validated, and decompressed by streaming. Once per hash algorithm the split lists
    (Stream(validate_hash=ALGO).get_shards / prepare_shard, then each shard's MDSReader.get_item
    in order), and once with a copy whose first shard has one byte flipped, which must be refused
    with streaming's "Checksum failure". Then, where streaming.base.dataset imports,
    StreamingDataset(remote=..., local=..., split=..., shuffle=False) is iterated in order too.
    Every sample's columns must equal expected.json: the token column (ndarray as its values,
    bytes as int64 ids: llm-foundry's token_encoding_type int64) and the other columns.
(b) Write: the same fixture specs (models/make_mds_fixtures.py fixtures(), with the size_limit
    our index records) are written with streaming's MDSWriter into the scratch folder, and its
    files must be byte-identical to ours (index.json and every shard). Differences are reported
    precisely: index.json entry by entry, shards by region (count, offsets, config, sample k) on
    the decompressed bytes, and whether the compressed bytes alone differ.

Importing the package `streaming` runs streaming/__init__.py, which pulls every cloud client,
PIL, torch's data loader and more. Instead, `streaming` and `streaming.base` are set up here as
bare packages over the checkout (their __init__.py is not run), and only the submodules needed
are imported. Modules they import at load time that Debian 12 does not package get small
stand-ins in sys.modules, each said below; the stand-ins matter only where noted:
  zstd      python-zstd, streaming's zstd binding: compress(data, level) and decompress(data)
            through python3-zstandard (the same libzstd one-shot compression, frame with the
            content size, no checksum). So (b)'s compressed bytes compare zstandard with
            zstandard: they show that streaming compresses the same raw bytes at the same level;
            python-zstd's own build of libzstd may emit other (equally valid) frames.
  brotli, snappy   other compressions streaming offers; unused (raise if called).
  PIL       image encodings of streaming's MDS encodings module; unused (placeholders).
  tqdm      progress bars of the uploaders; unused.
  catalogue streams registry (streaming.base.registry_utils): a dict-backed Registry.
  filelock  StreamingDataset's cache and barrier locks: fcntl.flock plus a thread lock.
Prints one line per check and a summary; exit status 1 if any check failed.
"""

import argparse
import fcntl
import json
import os
import shutil
import sys
import threading
import types

import numpy as np
import zstandard

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "data", "mds")
sys.path.insert(0, REPO)


def stub(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def unused(*_args, **_kwargs):
    raise RuntimeError("a stand-in module of bench/mds_streaming_check.py was called")


class Registry:
    """catalogue.Registry, as far as streaming's TypedRegistry uses it."""

    def __init__(self, namespace, entry_points=False):
        self.namespace, self.items = namespace, {}

    def register(self, name, func=None):
        self.items[name] = func
        return func

    def get(self, name):
        return self.items[name]

    def get_all(self):
        return dict(self.items)


class FileLock:
    """filelock.FileLock: an exclusive flock on the file, re-entrant within one thread."""

    def __init__(self, path, timeout=-1):
        self.path, self.fd, self.depth, self.thread_lock = path, None, 0, threading.RLock()

    def acquire(self, timeout=None, poll_interval=None):
        self.thread_lock.acquire()
        if self.depth == 0:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.depth += 1
        return self

    def release(self, force=False):
        self.depth -= 1
        if self.depth == 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
        self.thread_lock.release()

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def install_stand_ins():
    """Stand-ins for the modules streaming imports that Debian 12 lacks (see the docstring)."""
    def have(name):
        try:
            __import__(name)
            return True
        except ImportError:
            return False

    used = []
    if not have("zstd"):
        stub("zstd", compress=lambda data, level=3: zstandard.ZstdCompressor(level=level).compress(data),
             decompress=lambda data: zstandard.ZstdDecompressor().decompress(data))
        used.append("zstd (via zstandard)")
    for name in ("brotli", "snappy"):
        if not have(name):
            stub(name, compress=unused, decompress=unused)
            used.append(name)
    if not have("PIL"):
        image = stub("PIL.Image", Image=type("Image", (), {}), open=unused)
        stub("PIL", Image=image, __path__=[])
        stub("PIL.JpegImagePlugin", JpegImageFile=type("JpegImageFile", (), {}))
        used.append("PIL")
    if not have("tqdm"):
        stub("tqdm", tqdm=unused)
        used.append("tqdm")
    if not have("catalogue"):
        stub("catalogue", Registry=Registry, check_exists=lambda *a: False,
             RegistryError=type("RegistryError", (Exception,), {}), REGISTRY={})
        used.append("catalogue")
    if not have("filelock"):
        stub("filelock", FileLock=FileLock)
        used.append("filelock")
    return used


def import_streaming(src):
    """streaming's stream, writer and (where it imports) dataset modules, from the checkout."""
    root = os.path.join(src, "streaming")
    if not os.path.isfile(os.path.join(root, "base", "format", "mds", "writer.py")):
        sys.exit(f"mds_streaming_check: error: {src} is not a checkout of mosaicml/streaming "
                 "(no streaming/base/format/mds)")
    stub("streaming", __path__=[root])
    stub("streaming.base", __path__=[os.path.join(root, "base")])
    from streaming.base import stream, world
    from streaming.base.format.mds import writer
    version = {}
    exec(open(os.path.join(root, "_version.py")).read(), version)
    try:
        from streaming.base import dataset
    except ImportError as e:
        dataset = f"not importable: {e}"
    return types.SimpleNamespace(stream=stream, world=world, writer=writer, dataset=dataset,
                                 version=version["__version__"])


def token_values(value, encoding):
    """The token column's value as a list (bytes: int64 ids, as llm-foundry reads them)."""
    if encoding == "bytes":
        return np.frombuffer(value, np.int64).tolist()
    return np.asarray(value).reshape(-1).tolist()


def plain(value):
    """A decoded non-token value as JSON's value."""
    return value.item() if isinstance(value, np.generic) else value


def sample_problems(expected, key, rows, samples):
    """Differences between decoded samples and expected.json's `key` rows and `other` columns."""
    token = expected["token_column"]
    if len(samples) != len(rows) and token is not None:
        return [f"{len(samples)} samples, expected {len(rows)}"]
    problems = []
    for i, sample in enumerate(samples):
        if sorted(sample) != sorted(expected["columns"]):
            problems.append(f"sample {i}: columns {sorted(sample)}")
            continue
        got = token_values(sample[token], expected["columns"][token]) if token is not None else None
        if token is not None and got != rows[i]:
            problems.append(f"sample {i}: {token} {got} != {rows[i]}")
        for name, values in (expected.get("other", {}) if key == "samples" else {}).items():
            if plain(sample[name]) != values[i]:
                problems.append(f"sample {i}: {name} {sample[name]!r} != {values[i]!r}")
    return problems[:5]


def read_split(st, remote, local, split, algo):
    """The split's samples as streaming's Stream and MDSReader read them (hash-validated with algo)."""
    stream = st.stream.Stream(remote=remote, local=local, split=split, validate_hash=algo)
    stream.apply_default({"split": None, "download_retry": 2, "download_timeout": 60,
                          "validate_hash": None, "keep_zip": False})
    samples = []
    for shard in stream.get_shards(st.world.World.detect(), allow_unsafe_types=False):
        stream.prepare_shard(shard)
        samples += [shard.get_item(i) for i in range(shard.samples)]
    return samples


def read_dataset(st, remote, local, split, algo):
    """The split's samples as StreamingDataset(shuffle=False) iterates them."""
    ds = st.dataset.StreamingDataset(remote=remote, local=local, split=split, shuffle=False,
                                     validate_hash=algo, batch_size=1)
    return list(ds)


def corrupted_refused(st, fixture, split, scratch, algo):
    """Whether streaming refuses a copy of the split whose first shard has one byte flipped."""
    remote = os.path.join(scratch, "corrupt")
    shutil.copytree(os.path.join(fixture, split), os.path.join(remote, split))
    index = json.load(open(os.path.join(remote, split, "index.json")))
    shard = index["shards"][0]
    path = os.path.join(remote, split, (shard["zip_data"] or shard["raw_data"])["basename"])
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))
    try:
        read_split(st, remote, os.path.join(scratch, "corrupt_local"), split, algo)
    except ValueError as e:
        return "Checksum failure" in str(e)
    return False


def check_samples(results, line, expected, key, read):
    """Reports whether read() (streaming reading a split) gives expected.json's samples."""
    try:
        samples = read()
    except Exception as e:  # noqa: BLE001  (streaming's own error is the finding)
        report(results, False, line, [f"{type(e).__name__}: {e}"])
        return
    problems = sample_problems(expected, key, expected.get(key, []), samples)
    report(results, not problems, f"{line}: {len(samples)} samples", problems)


def check_read(st, name, scratch, results):
    """(a): every split of fixture `name` read by streaming, once per hash, and corrupted."""
    fixture = os.path.join(FIXTURES, name)
    expected = json.load(open(os.path.join(fixture, "expected.json")))
    splits = [d for d in os.listdir(fixture) if os.path.isfile(os.path.join(fixture, d, "index.json"))]
    for split in sorted(splits):
        key = "samples" if split == "train" else split + "_samples"
        shards = json.load(open(os.path.join(fixture, split, "index.json")))["shards"]
        algos = shards[0]["hashes"] or [None]
        what = f"{len(shards)} shard(s), compression {shards[0]['compression']}, columns {expected['columns']}"
        for n, algo in enumerate(algos):
            local = os.path.join(scratch, f"read_{name}_{split}_{n}")
            check_samples(results, f"read  {name}/{split} Stream+MDSReader, validate_hash={algo}, {what}",
                          expected, key, lambda: read_split(st, fixture, local, split, algo))
        if algos != [None]:
            corrupt = os.path.join(scratch, f"corrupt_{name}_{split}")
            refused = corrupted_refused(st, fixture, split, corrupt, algos[0])
            report(results, refused,
                   f"read  {name}/{split}: a flipped byte in shard 0 refused by validate_hash={algos[0]}")
        if not isinstance(st.dataset, str):
            local = os.path.join(scratch, f"dataset_{name}_{split}")
            check_samples(results, f"read  {name}/{split} StreamingDataset(shuffle=False), "
                          f"validate_hash={algos[0]}", expected, key,
                          lambda: read_dataset(st, fixture, local, split, algos[0]))


def shard_regions(raw):
    """[(name, start, end)] of a raw shard: count, offsets, config, each sample."""
    n = int(np.frombuffer(raw[:4], "<u4")[0])
    offsets = np.frombuffer(raw[4:8 + 4 * n], "<u4").tolist()
    regions = [("sample count", 0, 4), ("offsets", 4, 8 + 4 * n), ("config", 8 + 4 * n, offsets[0])]
    return regions + [(f"sample {k}", offsets[k], offsets[k + 1]) for k in range(n)]


def raw_bytes(path):
    data = open(path, "rb").read()
    return zstandard.ZstdDecompressor().decompress(data) if path.endswith(".zstd") else data


def shard_difference(ours, theirs):
    """Where two shard files differ, in words."""
    a, b = raw_bytes(ours), raw_bytes(theirs)
    if a == b:
        return "compressed bytes differ, decompressed shards identical"
    at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    region = next((r for r, s, e in shard_regions(a) if s <= at < e), "past our end")
    return f"raw {len(a)} vs {len(b)} bytes, first difference at byte {at} ({region})"


def json_difference(a, b, path="index"):
    """Paths where two JSON values differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return sum((json_difference(a.get(k), b.get(k), f"{path}.{k}") for k in keys), [])
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return sum((json_difference(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b))), [])
    return [] if a == b else [f"{path}: ours {json.dumps(a)}, streaming's {json.dumps(b)}"]


def split_differences(ours, theirs):
    """The files of two split folders that differ, each with where."""
    names = sorted(set(os.listdir(ours)) | set(os.listdir(theirs)))
    out = []
    for f in names:
        a, b = os.path.join(ours, f), os.path.join(theirs, f)
        if not (os.path.isfile(a) and os.path.isfile(b)):
            out.append(f"{f}: only in {'ours' if os.path.isfile(a) else 'streaming'}")
        elif open(a, "rb").read() != open(b, "rb").read():
            if f == "index.json":
                ja, jb = json.load(open(a)), json.load(open(b))
                where = "same JSON, other text" if ja == jb else "; ".join(json_difference(ja, jb))
                out.append(f"index.json: {where}")
            else:
                out.append(f"{f}: {shard_difference(a, b)}")
    return out


def check_write(st, name, fx, scratch, results):
    """(b): fixture `name` written by streaming's MDSWriter, compared byte for byte with ours."""
    options = fx.get("options", {})
    for split, (samples, _, _) in fx["splits"].items():
        ours = os.path.join(FIXTURES, name, split)
        index = json.load(open(os.path.join(ours, "index.json")))
        theirs = os.path.join(scratch, f"write_{name}", split)
        with st.writer.MDSWriter(columns=fx["columns"], out=theirs,
                                 compression=options.get("compression"),
                                 hashes=sorted(options.get("hashes", ())),
                                 size_limit=index["shards"][0]["size_limit"]) as w:
            for sample in samples:
                w.write(sample)
        diff = split_differences(ours, theirs)
        files = sorted(os.listdir(ours))
        report(results, not diff, f"write {name}/{split} MDSWriter: {', '.join(files)} "
               + ("byte-identical" if not diff else "differ"), diff)


def report(results, ok, line, problems=()):
    results.append(ok)
    print(("ok    " if ok else "FAIL  ") + line, flush=True)
    for p in problems:
        print("        " + p)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streaming", required=True,
                   help="a checkout of mosaicml/streaming (the folder holding streaming/)")
    p.add_argument("--scratch", required=True, help="an empty folder for streaming's caches and output")
    a = p.parse_args()
    stand_ins = install_stand_ins()
    st = import_streaming(os.path.abspath(a.streaming))
    from models.make_mds_fixtures import fixtures
    print(f"streaming {st.version} from {a.streaming}; stand-ins: {', '.join(stand_ins) or 'none'}; "
          f"StreamingDataset: {'imported' if not isinstance(st.dataset, str) else st.dataset}")
    results = []
    specs = fixtures()
    for name in sorted(specs):
        check_read(st, name, a.scratch, results)
        check_write(st, name, specs[name], a.scratch, results)
    print(f"{results.count(True)} passed, {results.count(False)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
