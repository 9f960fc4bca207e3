// libFuzzer target: the MDS dataset reader (runtime/mds.h), behind foundry-run --data DIR. The
// input is an index.json and one shard:
//   [4 bytes: n, little-endian][n bytes: index.json's text][the rest: a shard file's bytes]
// (tests/fuzz/make_mds_corpus.py writes such pairs from tests/data/mds). The index goes through
// ParseMdsIndex; when it parses, the shard is checked against its first entry (CheckMdsShard),
// every column of every sample is cut out (MdsColumnBytes) and the token column decoded
// (MdsTokenCodecOf, DecodeMdsTokens) as each token_encoding_type would read it. Then the pair is
// written as a split folder (index.json, and the shard under each of the first entries' basenames:
// the zip_data one when the bytes are a zstd frame and the entry has one, else the raw_data one)
// in a folder of this process in the temp folder ($TMPDIR, else /tmp), which MdsDataset::Open opens
// and Tokens reads sample by sample, in index order and in a shuffled MdsOrder (which must be a
// permutation). Any input must end in samples or clean errors; a crash, a sanitizer report, a leak,
// a hang or an empty, multi-line or over-4-KiB message is a finding. Build and run with
// tests/fuzz/build.sh.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/mds.h"

namespace {

namespace fs = std::filesystem;

void CheckText(const std::string& m, const char* stage) {
  if (m.empty() || m.find('\n') != std::string::npos || m.size() > 4096) {
    std::fprintf(stderr, "bad error message at %s (%zu bytes): '%.2000s'\n", stage, m.size(),
                 m.c_str());
    std::abort();
  }
}

void CheckMessage(const foundry::Status& st, const char* stage) {
  if (!st.ok()) CheckText(st.message(), stage);
}

// `tokens`, else `input_ids`: the column MdsDataset trains on.
int TokenColumn(const foundry::MdsShardEntry& e) {
  for (const char* want : {"tokens", "input_ids"})
    for (size_t c = 0; c < e.columns.size(); ++c)
      if (e.columns[c].name == want) return static_cast<int>(c);
  return -1;
}

// The parsers on bytes in memory: the shard against the index's first entry.
void ReadShard(const foundry::MdsShardEntry& entry, std::string_view shard) {
  using namespace foundry;
  std::vector<int64_t> offsets;
  Status st = CheckMdsShard(shard, entry, "fuzz shard", offsets);
  CheckMessage(st, "check shard");
  if (!st.ok()) return;
  if (offsets.size() != static_cast<size_t>(entry.samples) + 1 ||
      offsets.back() != static_cast<int64_t>(shard.size())) {
    std::fprintf(stderr, "CheckMdsShard accepted a shard with a wrong offset table\n");
    std::abort();
  }
  const int token = TokenColumn(entry);
  std::vector<StatusOr<MdsTokenCodec>> codecs;
  if (token >= 0)
    for (const char* type : {"int64", "uint16", "int8", "uint32", "float32", "int"}) {
      codecs.push_back(MdsTokenCodecOf(entry.columns[static_cast<size_t>(token)], type));
      CheckMessage(codecs.back().status(), "codec");
    }
  std::vector<int64_t> ids;
  for (size_t j = 0; j + 1 < offsets.size(); ++j) {
    const std::string_view sample = shard.substr(static_cast<size_t>(offsets[j]),
                                                 static_cast<size_t>(offsets[j + 1] - offsets[j]));
    for (size_t c = 0; c <= entry.columns.size(); ++c) {  // one past the end: an error
      StatusOr<std::string_view> col = MdsColumnBytes(sample, entry, c);
      CheckMessage(col.status(), "column");
      if (!col.ok()) continue;
      if (col->data() < sample.data() ||
          col->data() + col->size() > sample.data() + sample.size()) {
        std::fprintf(stderr, "MdsColumnBytes returned bytes outside the sample\n");
        std::abort();
      }
      if (static_cast<int>(c) != token) continue;
      for (const auto& codec : codecs) {
        if (!codec.ok()) continue;
        std::string error;
        if (!DecodeMdsTokens(*codec, *col, ids, error)) CheckText(error, "decode");
      }
    }
  }
}

bool WriteFile(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// The pair as a split folder, opened and read whole.
void ReadFolder(const std::vector<foundry::MdsShardEntry>& entries, std::string_view index,
                std::string_view shard) {
  using namespace foundry;
  static const fs::path dir = fs::temp_directory_path() / ("mds_fuzz." + std::to_string(getpid()));
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!fs::create_directory(dir, ec)) return;
  const bool zstd =
      shard.size() >= 4 && shard.substr(0, 4) == std::string_view("\x28\xb5\x2f\xfd", 4);
  bool written = WriteFile(dir / "index.json", index);
  std::set<std::string> names;
  for (size_t s = 0; s < entries.size() && s < 4; ++s) {
    const MdsShardEntry& e = entries[s];
    const std::string& name = zstd && e.zip ? e.zip->basename : e.raw.basename;
    if (name != "index.json" && names.insert(name).second)
      written = written && WriteFile(dir / name, shard);
  }
  if (written) {
    for (const char* type : {"int64", "uint16"}) {
      StatusOr<std::unique_ptr<MdsDataset>> d = MdsDataset::Open(dir.string(), "--data fuzz", type);
      CheckMessage(d.status(), "open");
      if (!d.ok()) continue;
      const MdsDataset& ds = **d;
      CheckText(ds.DescribeFormat(), "describe");
      const std::vector<int64_t>& starts = ds.shard_starts();
      if (starts.size() != static_cast<size_t>(ds.num_shards()) + 1 ||
          starts.back() != ds.num_samples()) {
        std::fprintf(stderr, "shard_starts disagrees with num_shards / num_samples\n");
        std::abort();
      }
      std::vector<int64_t> ids;
      CheckMessage(ds.Tokens(-1, ids), "tokens -1");
      CheckMessage(ds.Tokens(ds.num_samples(), ids), "tokens past the end");
      // Every sample of a shard that reads; the rest of a shard after its first error (a shard
      // that does not load may claim 2^40 samples).
      for (size_t s = 0; s + 1 < starts.size(); ++s)
        for (int64_t i = starts[s]; i < starts[s + 1]; ++i) {
          Status st = ds.Tokens(i, ids);
          CheckMessage(st, "tokens");
          if (!st.ok()) break;
          if (ds.fixed_tokens() >= 0 && static_cast<int64_t>(ids.size()) != ds.fixed_tokens()) {
            std::fprintf(stderr, "sample %lld has %zu ids, not fixed_tokens() %lld\n",
                         static_cast<long long>(i), ids.size(),
                         static_cast<long long>(ds.fixed_tokens()));
            std::abort();
          }
        }
      // foundry's shuffled order over the split: a permutation of each epoch's samples.
      const int64_t n = ds.num_samples();
      if (n <= (int64_t{1} << 16)) {
        const int64_t epoch = n - (n > 1 ? static_cast<int64_t>(index.size() % 2) : 0);
        MdsOrder order(starts, epoch, true, index.size(),
                       1 + static_cast<int64_t>(shard.size() % 9));
        std::vector<char> seen(static_cast<size_t>(n), 0);
        for (int64_t p = 0; p < 2 * epoch; ++p) {
          const int64_t k = order.Sample(p);
          if (k < 0 || k >= n || (p < epoch && seen[static_cast<size_t>(k)]++)) {
            std::fprintf(stderr,
                         "MdsOrder position %lld: sample %lld is outside the split or read twice\n",
                         static_cast<long long>(p), static_cast<long long>(k));
            std::abort();
          }
        }
        if (epoch > 0) CheckMessage(ds.Tokens(order.Sample(epoch - 1), ids), "tokens shuffled");
      }
    }
  }
  fs::remove_all(dir, ec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace foundry;
  if (size < 4) return 0;
  const uint32_t n = uint32_t{data[0]} | uint32_t{data[1]} << 8 | uint32_t{data[2]} << 16 |
                     uint32_t{data[3]} << 24;
  if (n > size - 4) return 0;
  const std::string_view index(reinterpret_cast<const char*>(data) + 4, n);
  const std::string_view shard(reinterpret_cast<const char*>(data) + 4 + n, size - 4 - n);
  StatusOr<std::vector<MdsShardEntry>> entries = ParseMdsIndex(index, "--data fuzz");
  if (!entries.ok()) {
    CheckMessage(entries.status(), "parse");
    return 0;
  }
  if (entries->empty()) {
    std::fprintf(stderr, "ParseMdsIndex accepted an index with no shards\n");
    std::abort();
  }
  ReadShard(entries->front(), shard);
  ReadFolder(*entries, index, shard);
  return 0;
}
