// Mosaic Data Shard (MDS) datasets: the folders mosaicml-streaming's MDSWriter writes and
// llm-foundry's `text` loaders read (convert_dataset_hf.py / convert_dataset_json.py with
// --concat_tokens, or a user's own MDSWriter). A split is a folder holding index.json and shard
// files shard.NNNNN.mds (raw) or shard.NNNNN.mds.zstd (compressed; streaming decompresses it
// beside itself when it reads it, so either or both may be present).
//
// index.json (version 2): {"version": 2, "shards": [entry, ...]}, each entry giving the shard's
// column_names / column_encodings / column_sizes (null: variable), compression (null or
// "zstd[:level]"), hashes (algorithm names), raw_data / zip_data ({basename, bytes, hashes:
// {algorithm: hex digest}}) and its samples.
//
// A raw shard: uint32 n; uint32 offsets[n + 1] (each sample's byte offset from the file's start;
// offsets[n] = the file's size); the shard's config as JSON text; the samples. A sample: a uint32
// size for each variable-size column, in column order, then each column's bytes in column order.
// All little-endian.
//
// Token columns (what is trained on): `tokens`, else `input_ids` (llm-foundry reads `tokens`), as
// `ndarray:DTYPE[:SHAPE]`, `ndarray` (dtype and shape in each sample) or `bytes` (ids of
// llm-foundry's token_encoding_type, default int64), of an integer dtype. Every other column is
// skipped by its size whatever its encoding (str, json, int, float, ...).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace foundry {

struct MdsColumn {
  std::string name;
  std::string encoding;  // as written: "ndarray:int32", "bytes", "str", "int", ...
  int64_t size = -1;     // fixed size in bytes; -1: variable (a uint32 size in each sample)
};

struct MdsFile {
  std::string basename;
  int64_t bytes = 0;
  std::vector<std::pair<std::string, std::string>> hashes;  // algorithm, hex digest
};

struct MdsShardEntry {
  std::vector<MdsColumn> columns;
  std::string compression;  // "" (none) or the algorithm ("zstd"), level dropped
  MdsFile raw;
  std::optional<MdsFile> zip;
  int64_t samples = 0;
};

// index.json's text -> its shards, every field checked: version 2, format "mds", column names,
// encodings (streaming's) and sizes (a fixed-size encoding's size must be the one it has), plain
// basenames (no '/', not "." or ".."), counts in range. Errors are one line, "`where`: ...".
StatusOr<std::vector<MdsShardEntry>> ParseMdsIndex(std::string_view text, const std::string& where);

// The fixed size of `encoding` in bytes, -1 for a variable-size one; an error for a name that is
// not an MDS encoding.
StatusOr<int64_t> MdsEncodedSize(const std::string& encoding);

// A raw shard's bytes checked against its entry: the sample count, an offset table that starts
// right after the header and config, never decreases, and ends at the file's end. `offsets` gets
// the n + 1 offsets.
Status CheckMdsShard(std::string_view data, const MdsShardEntry& entry, const std::string& where,
                     std::vector<int64_t>& offsets);

// Column `column`'s bytes within one sample's bytes, or an error when the sample's sizes run past
// its end.
StatusOr<std::string_view> MdsColumnBytes(std::string_view sample, const MdsShardEntry& entry,
                                          size_t column);

// How a token column's bytes become token ids.
struct MdsTokenCodec {
  enum class Header { kNone, kShape, kDtypeAndShape };
  Header header = Header::kNone;  // ndarray:DTYPE[:SHAPE] with a shape / bytes: kNone
  int width = 0;                  // bytes per id (kDtypeAndShape: read from each sample)
  bool is_signed = false;
  std::string describe;  // "ndarray:int32", "bytes of int64"
};
// `column`'s codec; `token_encoding_type` the dtype of `bytes` columns (llm-foundry's
// dataset.token_encoding_type: int8 ... uint64). Errors: a column that is not an integer array.
StatusOr<MdsTokenCodec> MdsTokenCodecOf(const MdsColumn& column,
                                        const std::string& token_encoding_type);
// The ids of one sample's token column; `error` gets what is wrong when it returns false.
bool DecodeMdsTokens(const MdsTokenCodec& codec, std::string_view bytes, std::vector<int64_t>& ids,
                     std::string& error);

// The hash algorithms foundry verifies, fastest first: xxh3_64, xxh64, xxh128 (or its other name
// xxh3_128), xxh32, sha1, sha256, md5 (and the other hashlib names OpenSSL knows). "" when it knows
// none of `algorithms`.
std::string MdsHashToVerify(const std::vector<std::pair<std::string, std::string>>& algorithms);
// The hex digest of `data` by `algorithm` (as Python's hashlib / xxhash hexdigest() writes it).
StatusOr<std::string> MdsHexDigest(const std::string& algorithm, std::string_view data);

// One split, opened for reading samples' token ids. Raw shards are memory-mapped; compressed
// ones are decompressed (zstd) into memory when first read, at most kMdsCacheBytes of them held
// at once (least recently read dropped first). A shard's hash (MdsHashToVerify of its entry) is
// verified when it is first read. Reads are safe from several threads.
class MdsDataset {
 public:
  struct Bytes;  // a shard's bytes: mapped, or decompressed
  static constexpr int64_t kMdsCacheBytes = int64_t{1} << 30;

  // `dir`: the split folder; `where`: how messages name it ("--data out/c4/train"). Checks at
  // once, before any sample is read: index.json, a token column in every shard with one codec,
  // each shard's file present with the size index.json gives (the raw file when present, else
  // the compressed one, which must be zstd), and every raw shard's header and offset table.
  static StatusOr<std::unique_ptr<MdsDataset>> Open(const std::string& dir,
                                                    const std::string& where,
                                                    const std::string& token_encoding_type);
  ~MdsDataset();

  const std::string& dir() const { return dir_; }
  int64_t num_samples() const { return total_; }
  int64_t num_shards() const { return static_cast<int64_t>(shards_.size()); }
  const std::string& token_column() const { return token_column_; }
  // Each sample's token count when the column has a fixed size, else -1.
  int64_t fixed_tokens() const { return fixed_tokens_; }
  // "MDS, 4 shards, 48 samples, column tokens (ndarray:int32), zstd, hashes verified: xxh64"
  std::string DescribeFormat() const;
  // Sample `i`'s token ids (all of them), in [0, num_samples()).
  Status Tokens(int64_t i, std::vector<int64_t>& ids) const;
  // Each shard's raw bytes (index.json's raw_data.bytes).
  std::vector<int64_t> shard_raw_bytes() const;
  // The index of each shard's first sample, then num_samples() (size num_shards() + 1).
  const std::vector<int64_t>& shard_starts() const { return starts_; }

 private:
  struct Shard;
  MdsDataset() = default;
  // Shard `s`'s bytes: loaded (read and decompressed) when not held, and verified when first read.
  StatusOr<std::shared_ptr<const Bytes>> Load(size_t s) const;  // mu_ held
  StatusOr<std::shared_ptr<const Bytes>> Decompress(const Shard& shard) const;
  Status ChooseTokenColumn(const MdsShardEntry& first, const std::string& token_encoding_type);
  Status OpenShard(size_t s);

  std::string dir_, where_, token_column_;
  MdsTokenCodec codec_;
  int64_t total_ = 0, fixed_tokens_ = -1;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<int64_t> starts_;
  std::string verified_with_;  // the algorithms verified, for DescribeFormat
  mutable std::mutex mu_;
  mutable int64_t held_bytes_ = 0;
  mutable uint64_t clock_ = 0;
};

// The order samples are read in: foundry's own, not streaming's (its py1e shuffle and its
// partition over nodes and workers are not reproduced). Position p of the stream is sample
// Sample(p): epoch e = p / epoch_samples; unshuffled, its samples in index order; shuffled, the
// shards in an order drawn for the epoch, grouped in that order into runs of at most
// `group_bytes` raw bytes (one shard at least; 0: one group), the samples of each group cut into
// blocks of `block` samples, and each block's samples permuted (Fisher-Yates with Philox(seed, e,
// group, block)). A block's shards fit in what the reader holds decompressed, so a shuffled read
// decompresses each shard once an epoch however large `block` is.
class MdsOrder {
 public:
  MdsOrder() = default;
  // `shard_starts`: MdsDataset::shard_starts(). `epoch_samples` <= the total: with drop_last the
  // whole global batches of an epoch; the rest of its samples are not read that epoch.
  // `shard_bytes`: each shard's raw bytes (index.json's raw_data.bytes, so the order does not
  // depend on which files are compressed), for `group_bytes`.
  MdsOrder(std::vector<int64_t> shard_starts, int64_t epoch_samples, bool shuffle, uint64_t seed,
           int64_t block, std::vector<int64_t> shard_bytes = {}, int64_t group_bytes = 0);
  int64_t Sample(int64_t position) const;
  int64_t epoch_samples() const { return epoch_samples_; }
  bool shuffled() const { return shuffle_; }
  uint64_t seed() const { return seed_; }
  int64_t block() const { return block_; }

 private:
  void SetEpoch(int64_t epoch) const;
  void SetBlock(int64_t group, int64_t block) const;

  std::vector<int64_t> starts_, shard_bytes_;
  int64_t total_ = 0, epoch_samples_ = 0, block_ = 1, group_bytes_ = 0;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  // The epoch's shard order (as sample ranges), its groups (the offset each starts at in the
  // shuffled sequence) and the current block (its group and index in it) and permutation.
  mutable std::mutex mu_;
  mutable int64_t epoch_ = -1, group_index_ = -1, block_index_ = -1;
  mutable std::vector<int64_t> order_starts_, order_shards_, group_starts_, permutation_;
};

// Uniform in [0, n) from Philox(seed, key, counter): the 64-bit product's high half (Lemire).
uint64_t PhiloxBelow(uint64_t seed, uint64_t key, uint64_t counter, uint64_t n);

}  // namespace foundry
