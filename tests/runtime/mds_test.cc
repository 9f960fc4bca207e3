// The MDS reader (runtime/mds.h): the fixtures of tests/data/mds read as models/mds.py wrote them
// (expected.json), damaged copies refused with a message naming the problem, hashes against
// Python's, foundry's sample order, and the token decoders on hand-made bytes.
#include "runtime/mds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/support/source_dir.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path Fixture(const std::string& name) { return SourceDir() / "tests/data/mds" / name; }

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

json ReadJson(const fs::path& path) { return json::parse(ReadBytes(path)); }

uint32_t GetU32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

void PutU32(std::string& s, size_t at, uint32_t v) { std::memcpy(s.data() + at, &v, 4); }

// A copy of fixture `name`'s split `split` in `tmp` (tests never modify tests/data), its path.
std::string CopySplit(const TempDir& tmp, const std::string& name,
                      const std::string& split = "train", const std::string& as = "") {
  const std::string dir = tmp / (as.empty() ? split : as);
  fs::copy(Fixture(name) / split, dir, fs::copy_options::recursive);
  return dir;
}

// Rewrites the index.json of `dir` with `edit` applied.
void EditIndex(const std::string& dir, const std::function<void(json&)>& edit) {
  json index = ReadJson(fs::path(dir) / "index.json");
  edit(index);
  WriteBytes(fs::path(dir) / "index.json", index.dump());
}

// Rewrites file `name` of `dir` with `edit` applied to its bytes.
void EditFile(const std::string& dir, const std::string& name,
              const std::function<void(std::string&)>& edit) {
  std::string bytes = ReadBytes(fs::path(dir) / name);
  edit(bytes);
  WriteBytes(fs::path(dir) / name, bytes);
}

// Open's error for `dir` ("" when it opens).
std::string OpenError(const std::string& dir, const std::string& token_encoding_type = "int64") {
  auto d = MdsDataset::Open(dir, "--data d", token_encoding_type);
  return d.ok() ? "" : d.status().message();
}

// The error of reading every sample of `dir` (which opens), "" when all read.
std::string ReadError(const std::string& dir) {
  auto d = MdsDataset::Open(dir, "--data d", "int64");
  if (!d.ok()) return "Open failed: " + d.status().message();
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < (*d)->num_samples(); ++i) {
    Status st = (*d)->Tokens(i, ids);
    if (!st.ok()) return st.message();
  }
  return "";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// ---- the fixtures, as written ----------------------------------------------------------------

// Opens fixture `name`'s `split` and checks it against expected.json's `key` list: the sample
// count, the shard count, the token column and every sample's ids.
std::unique_ptr<MdsDataset> ExpectFixture(const std::string& name, int64_t shards,
                                          const std::string& split = "train",
                                          const std::string& key = "samples",
                                          const std::string& token_encoding_type = "int64") {
  const json expected = ReadJson(Fixture(name) / "expected.json");
  auto d =
      MdsDataset::Open((Fixture(name) / split).string(), "--data " + name, token_encoding_type);
  EXPECT_TRUE(d.ok()) << d.status().message();
  if (!d.ok()) return nullptr;
  std::unique_ptr<MdsDataset> data = std::move(d).value();
  const json& samples = expected.at(key);
  EXPECT_GT(samples.size(), 0u);
  EXPECT_EQ(data->num_samples(), static_cast<int64_t>(samples.size())) << name;
  EXPECT_EQ(data->num_shards(), shards) << name;
  EXPECT_EQ(data->token_column(), expected.at("token_column").get<std::string>()) << name;
  EXPECT_EQ(data->shard_starts().front(), 0);
  EXPECT_EQ(data->shard_starts().back(), data->num_samples());
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < data->num_samples() && i < static_cast<int64_t>(samples.size()); ++i) {
    Status st = data->Tokens(i, ids);
    EXPECT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(ids, samples[static_cast<size_t>(i)].get<std::vector<int64_t>>())
        << name << " " << split << " sample " << i;
  }
  return data;
}

TEST(MdsFixtureTest, Int32ZstdSkipsOtherColumns) {
  auto d = ExpectFixture("int32_zstd", 4);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->shard_starts(), (std::vector<int64_t>{0, 12, 24, 36, 48}));
  EXPECT_EQ(d->fixed_tokens(), -1);
  EXPECT_EQ(
      d->DescribeFormat(),
      "MDS, 4 shards, 48 samples, column tokens (ndarray:int32), zstd, hashes verified: xxh64");
}

TEST(MdsFixtureTest, Uint16None) {
  auto d = ExpectFixture("uint16_none", 2);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->shard_starts(), (std::vector<int64_t>{0, 20, 40}));
  EXPECT_HAS(d->DescribeFormat(), "column tokens (ndarray:uint16), raw, hashes verified: none");
}

TEST(MdsFixtureTest, BytesInt64) {
  auto d = ExpectFixture("bytes_int64", 1);
  ASSERT_TRUE(d);
  EXPECT_HAS(d->DescribeFormat(), "column tokens (bytes of int64)");
}

TEST(MdsFixtureTest, InputIdsStaticShape) {
  auto d = ExpectFixture("input_ids_static", 1);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->fixed_tokens(), 16);
  // md5, sha256 and xxh3_64 listed: the fastest, xxh3_64, is verified.
  EXPECT_HAS(d->DescribeFormat(),
             "column input_ids (ndarray:uint32:16), zstd, hashes verified: xxh3_64");
}

TEST(MdsFixtureTest, NdarrayDynamicDtype) {
  auto d = ExpectFixture("ndarray_dynamic", 1);
  ASSERT_TRUE(d);
  EXPECT_HAS(d->DescribeFormat(), "column tokens (ndarray), raw, hashes verified: xxh128");
}

TEST(MdsFixtureTest, LongSamplesReadWhole) {
  auto d = ExpectFixture("long_samples", 1);
  ASSERT_TRUE(d);
  std::vector<int64_t> ids;
  ASSERT_TRUE(d->Tokens(23, ids).ok());
  EXPECT_EQ(ids.size(), 20u);  // cutting to the sequence is data.cc's
}

TEST(MdsFixtureTest, MptTinyTrainAndVal) {
  EXPECT_TRUE(ExpectFixture("mpt_tiny", 3, "train", "samples"));
  EXPECT_TRUE(ExpectFixture("mpt_tiny", 1, "val", "val_samples"));
}

TEST(MdsFixtureTest, SampleOutsideTheSplit) {
  auto d = MdsDataset::Open((Fixture("uint16_none") / "train").string(), "--data d", "int64");
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::vector<int64_t> ids;
  EXPECT_EQ((*d)->Tokens(40, ids).message(), "--data d: sample 40 is outside its 40 samples");
  EXPECT_EQ((*d)->Tokens(-1, ids).message(), "--data d: sample -1 is outside its 40 samples");
}

// Threads reading the compressed shards at once get the same ids as one thread.
TEST(MdsFixtureTest, ThreadsReadTheSameIds) {
  auto d = MdsDataset::Open((Fixture("int32_zstd") / "train").string(), "--data d", "int64");
  ASSERT_TRUE(d.ok()) << d.status().message();
  const MdsDataset& data = **d;
  const auto samples = ReadJson(Fixture("int32_zstd") / "expected.json")
                           .at("samples")
                           .get<std::vector<std::vector<int64_t>>>();
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<int64_t> ids;
      for (int64_t k = 0; k < 48; ++k) {
        const int64_t i = (k * 7 + t * 13) % 48;
        if (!data.Tokens(i, ids).ok() || ids != samples[static_cast<size_t>(i)]) ++wrong[t];
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, (std::vector<int>{0, 0, 0, 0}));
}

// ---- refused fixtures --------------------------------------------------------------------------

TEST(MdsRefusedTest, FloatTokens) {
  const std::string e = OpenError((Fixture("float_tokens") / "train").string());
  EXPECT_HAS(e, "--data d: column 'tokens' (ndarray:float32) holds float32 values");
  EXPECT_HAS(e, "token ids are integers");
}

TEST(MdsRefusedTest, TextOnly) {
  const std::string e = OpenError((Fixture("text_only") / "train").string());
  EXPECT_HAS(e, "no token column (tokens or input_ids) among its columns text (str)");
  EXPECT_HAS(e, "does not tokenize");
}

TEST(MdsRefusedTest, BytesOfFloat32) {
  const std::string e = OpenError((Fixture("bytes_int64") / "train").string(), "float32");
  EXPECT_HAS(e, "column 'tokens' (bytes): token_encoding_type 'float32' is not one of int8");
  // Another integer type reads the same bytes as other ids (8 int32 halves per int64 pair).
  auto d = MdsDataset::Open((Fixture("bytes_int64") / "train").string(), "--data d", "int32");
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::vector<int64_t> ids;
  ASSERT_TRUE((*d)->Tokens(0, ids).ok());
  EXPECT_EQ(ids.size(), 32u);
}

// ---- damaged copies ----------------------------------------------------------------------------

TEST(MdsDamagedTest, CopyOpens) {  // the copies below differ from a good one only where damaged
  TempDir tmp;
  EXPECT_EQ(ReadError(CopySplit(tmp, "uint16_none")), "");
}

TEST(MdsDamagedTest, TruncatedRawShard) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "uint16_none");
  EditFile(dir, "shard.00001.mds", [](std::string& b) { b.resize(1000); });
  EXPECT_EQ(OpenError(dir),
            "--data d: shard.00001.mds has 1000 bytes but index.json says 1026 (truncated or "
            "replaced?)");
  // index.json made to agree with the cut file: the offset table still says 1026.
  EditIndex(dir, [](json& j) { j["shards"][1]["raw_data"]["bytes"] = 1000; });
  EXPECT_EQ(OpenError(dir),
            "--data d: shard.00001.mds: its offset table ends at byte 1026 but the shard has 1000 "
            "(truncated, or the table points outside the file)");
}

// uint16_none's shards hold 20 samples: offsets[i] at byte 4 + 4 i, offsets[20] at 84. Patching
// the table in place keeps the file's size (raw_data.bytes stays right): only the table is wrong.
TEST(MdsDamagedTest, OffsetTablePointsOutside) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "uint16_none");
  EditFile(dir, "shard.00000.mds", [](std::string& b) { PutU32(b, 84, 1030); });
  EXPECT_EQ(OpenError(dir),
            "--data d: shard.00000.mds: its offset table ends at byte 1030 but the shard has 1026 "
            "(truncated, or the table points outside the file)");
}

TEST(MdsDamagedTest, OffsetTableDecreases) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "uint16_none");
  uint32_t sample3 = 0;
  EditFile(dir, "shard.00000.mds", [&](std::string& b) {
    sample3 = GetU32(b, 4 + 4 * 3);
    PutU32(b, 4 + 4 * 4, sample3 - 1);  // sample 3 ends before it starts
  });
  EXPECT_EQ(OpenError(dir), "--data d: shard.00000.mds: sample 3 ends at byte " +
                                std::to_string(sample3 - 1) + ", before it starts at " +
                                std::to_string(sample3) + " (offset table damaged)");
}

TEST(MdsDamagedTest, OffsetIntoTheHeader) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "uint16_none");
  EditFile(dir, "shard.00000.mds", [](std::string& b) { PutU32(b, 4, 80); });
  EXPECT_EQ(OpenError(dir),
            "--data d: shard.00000.mds: its first sample starts at byte 80, inside the header "
            "(offset table damaged)");
}

TEST(MdsDamagedTest, WrongSampleCount) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "uint16_none");
  EditIndex(dir, [](json& j) { j["shards"][1]["samples"] = 21; });
  EXPECT_EQ(OpenError(dir), "--data d: shard.00001.mds: holds 20 samples but index.json says 21");
}

// int32_zstd lists sha1 and xxh64; xxh64 is the one verified, when a shard is first read.
TEST(MdsDamagedTest, ZstdShardFlippedByteFailsItsHash) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "int32_zstd");
  EditFile(dir, "shard.00002.mds.zstd", [](std::string& b) { b[b.size() / 2] ^= 0x10; });
  const std::string e = ReadError(dir);
  EXPECT_HAS(e, "--data d: shard.00002.mds.zstd: its xxh64 is ");
  EXPECT_HAS(e,
             " but index.json says " +
                 ReadJson(fs::path(dir) / "index.json")["shards"][2]["zip_data"]["hashes"]["xxh64"]
                     .get<std::string>() +
                 " (the file is damaged or was replaced)");
}

// Without hashes the damage reaches zstd: a flipped magic number is no zstd frame.
TEST(MdsDamagedTest, ZstdShardFlippedByteWithoutHashes) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "int32_zstd");
  EditIndex(dir, [](json& j) {
    for (json& s : j["shards"]) {
      s["hashes"] = json::array();
      s["raw_data"]["hashes"] = json::object();
      s["zip_data"]["hashes"] = json::object();
    }
  });
  EXPECT_EQ(ReadError(dir), "");
  EditFile(dir, "shard.00001.mds.zstd", [](std::string& b) { b[0] ^= 0x01; });
  EXPECT_EQ(ReadError(dir),
            "--data d: shard.00001.mds.zstd is not zstd data (its first frame's header is "
            "damaged or cut off)");
}

TEST(MdsDamagedTest, ZstdRawSizeWrong) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "int32_zstd");
  EditIndex(dir, [](json& j) { j["shards"][0]["raw_data"]["bytes"] = 2250; });
  EXPECT_EQ(ReadError(dir),
            "--data d: shard.00000.mds.zstd decompresses to 2246 bytes (its zstd header) but "
            "index.json says 2250");
  EditIndex(dir, [](json& j) { j["shards"][0]["raw_data"]["bytes"] = 2000; });
  EXPECT_EQ(ReadError(dir),
            "--data d: shard.00000.mds.zstd decompresses to 2246 bytes (its zstd header) but "
            "index.json says 2000");
}

// raw_data.bytes far beyond what a shard can be (2^40 - 1): refused from index.json, never by
// allocating a terabyte to decompress into; within 4 GiB but far beyond the frame's: refused
// from the frame's content size.
TEST(MdsDamagedTest, ZstdRawSizeFarTooLarge) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "int32_zstd");
  EditIndex(dir, [](json& j) { j["shards"][0]["raw_data"]["bytes"] = (int64_t{1} << 40) - 1; });
  EXPECT_EQ(ReadError(dir),
            "Open failed: --data d: index.json shard 0: raw_data: bytes 1099511627775 is past "
            "what a shard's uint32 offsets address (4 GiB)");
  EditIndex(dir, [](json& j) { j["shards"][0]["raw_data"]["bytes"] = (int64_t{1} << 32) - 1; });
  EXPECT_EQ(ReadError(dir),
            "--data d: shard.00000.mds.zstd decompresses to 2246 bytes (its zstd header) but "
            "index.json says 4294967295");
}

TEST(MdsDamagedTest, TruncatedZstdShard) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "int32_zstd");
  EditFile(dir, "shard.00003.mds.zstd", [](std::string& b) { b.resize(900); });
  EXPECT_EQ(OpenError(dir),
            "--data d: shard.00003.mds.zstd has 900 bytes but index.json says 976 (truncated or "
            "replaced?)");
}

TEST(MdsDamagedTest, MissingShard) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "uint16_none");
  fs::remove(fs::path(dir) / "shard.00001.mds");
  EXPECT_EQ(OpenError(dir), "--data d: shard.00001.mds is missing from " + dir +
                                " (index.json lists it, uncompressed)");
  const std::string zdir = CopySplit(tmp, "int32_zstd", "train", "z");
  fs::remove(fs::path(zdir) / "shard.00002.mds.zstd");
  EXPECT_EQ(OpenError(zdir), "--data d: shard.00002.mds.zstd is missing from " + zdir +
                                 " (nor is shard.00002.mds there)");
}

TEST(MdsDamagedTest, NoIndexOrNoFolder) {
  TempDir tmp;
  EXPECT_EQ(OpenError(tmp.str()),
            "--data d: no index.json in " + tmp.str() + " (an MDS split folder has one)");
  const std::string file = tmp.File("f.bin", "x");
  EXPECT_EQ(OpenError(file), "--data d: " + file + " is not a folder");
  EXPECT_EQ(OpenError(tmp / "none"), "--data d: " + (tmp / "none") + " is not a folder");
}

TEST(MdsDamagedTest, IndexNotJson) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "uint16_none");
  WriteBytes(fs::path(dir) / "index.json", "{\"version\": 2, \"shards\": [");
  EXPECT_EQ(OpenError(dir),
            "--data d: index.json is not a JSON object; is it an MDS dataset's index?");
}

// Compression "br" (streaming's brotli) with only the compressed file there: refused by name.
TEST(MdsDamagedTest, BrotliRefusedByName) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "int32_zstd");
  EditIndex(dir, [](json& j) { j["shards"][1]["compression"] = "br"; });
  const std::string e = OpenError(dir);
  EXPECT_HAS(e,
             "--data d: shard.00001.mds.zstd is compressed with 'br', which foundry does not "
             "read");
  EXPECT_HAS(e, "MDSWriter(compression='zstd')");
}

TEST(MdsDamagedTest, ShardsWithDifferentColumns) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "uint16_none");
  EditIndex(dir, [](json& j) { j["shards"][1]["column_names"][0] = "input_ids"; });
  EXPECT_EQ(OpenError(dir),
            "--data d: shard.00001.mds: its columns differ from the first shard's; one split has "
            "one schema");
  EditIndex(dir, [](json& j) {
    j["shards"][1]["column_names"][0] = "tokens";
    j["shards"][1]["column_encodings"][0] = "ndarray:int16";
  });
  EXPECT_HAS(OpenError(dir), "its columns differ from the first shard's");
}

// A sample's variable-size header (uint32 sizes, then the bytes) claiming more than the sample.
TEST(MdsDamagedTest, ColumnSizeRunsPastTheSample) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "uint16_none");
  EditFile(dir, "shard.00001.mds", [](std::string& b) {
    const uint32_t sample2 = GetU32(b, 4 + 4 * 2);
    ASSERT_EQ(GetU32(b, sample2), 34u);  // a shape header of 2 bytes, 16 uint16 ids
    PutU32(b, sample2, 35);
  });
  auto d = MdsDataset::Open(dir, "--data d", "int64");
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::vector<int64_t> ids;
  EXPECT_TRUE((*d)->Tokens(21, ids).ok());
  EXPECT_EQ((*d)->Tokens(22, ids).message(),
            "--data d: sample 22 (shard.00001.mds sample 2): column 'tokens' of 35 bytes runs past "
            "the sample's end (38 bytes)");
}

// An odd size: within the sample, but the 2-byte shape header and no whole number of uint16 ids.
TEST(MdsDamagedTest, ColumnNotWholeIds) {
  TempDir tmp;
  const std::string dir = CopySplit(tmp, "uint16_none");
  EditFile(dir, "shard.00000.mds", [](std::string& b) { PutU32(b, GetU32(b, 4), 33); });
  auto d = MdsDataset::Open(dir, "--data d", "int64");
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::vector<int64_t> ids;
  EXPECT_EQ((*d)->Tokens(0, ids).message(),
            "--data d: sample 0 (shard.00000.mds sample 0): column 'tokens' (ndarray:uint16): 31 "
            "bytes of ids are not whole 2-byte values");
}

// ---- index.json, field by field --------------------------------------------------------------

std::string IndexError(const std::function<void(json&)>& edit) {
  json j = ReadJson(Fixture("uint16_none") / "train/index.json");
  edit(j);
  auto parsed = ParseMdsIndex(j.dump(), "w");
  return parsed.ok() ? "" : parsed.status().message();
}

TEST(MdsIndexTest, GoodIndexParses) {
  auto parsed = ParseMdsIndex(ReadBytes(Fixture("int32_zstd") / "train/index.json"), "w");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  ASSERT_EQ(parsed->size(), 4u);
  const MdsShardEntry& s = (*parsed)[0];
  ASSERT_EQ(s.columns.size(), 5u);
  EXPECT_EQ(s.columns[0].name, "id");
  EXPECT_EQ(s.columns[0].size, 8);
  EXPECT_EQ(s.columns[1].size, -1);
  EXPECT_EQ(s.columns[4].encoding, "ndarray:int32");
  EXPECT_EQ(s.compression, "zstd");
  EXPECT_EQ(s.samples, 12);
  EXPECT_EQ(s.raw.basename, "shard.00000.mds");
  EXPECT_EQ(s.raw.bytes, 2246);
  ASSERT_TRUE(s.zip);
  EXPECT_EQ(s.zip->bytes, 1013);
  EXPECT_EQ(s.zip->hashes.size(), 2u);
  // "zstd:7": the level is dropped.
  auto level = ParseMdsIndex(ReadBytes(Fixture("input_ids_static") / "train/index.json"), "w");
  ASSERT_TRUE(level.ok()) << level.status().message();
  EXPECT_EQ((*level)[0].compression, "zstd");
  EXPECT_EQ(IndexError([](json&) {}), "");
}

TEST(MdsIndexTest, NotJsonOrWrongVersion) {
  EXPECT_EQ(ParseMdsIndex("not json", "w").status().message(),
            "w: index.json is not a JSON object; is it an MDS dataset's index?");
  EXPECT_EQ(ParseMdsIndex("[2]", "w").status().message(),
            "w: index.json is not a JSON object; is it an MDS dataset's index?");
  EXPECT_HAS(IndexError([](json& j) { j["version"] = 1; }),
             "w: index.json version is 1; foundry reads MDS index version 2");
  EXPECT_HAS(IndexError([](json& j) { j.erase("version"); }), "index.json version is missing");
  EXPECT_EQ(IndexError([](json& j) { j["shards"] = json::array(); }),
            "w: index.json lists no shards");
  EXPECT_EQ(IndexError([](json& j) { j["shards"][1]["version"] = 1; }),
            "w: index.json shard 1: version 1 is not MDS version 2");
}

TEST(MdsIndexTest, FormatNotMds) {
  EXPECT_EQ(IndexError([](json& j) { j["shards"][0]["format"] = "json"; }),
            "w: index.json shard 0: format is \"json\"; foundry reads MDS shards (format \"mds\")");
  EXPECT_HAS(IndexError([](json& j) { j["shards"][1].erase("format"); }),
             "shard 1: format is missing");
}

TEST(MdsIndexTest, ColumnSizesAgreeWithEncodings) {
  EXPECT_EQ(IndexError([](json& j) { j["shards"][0]["column_sizes"][0] = 32; }),
            "w: index.json shard 0: column 'tokens' (ndarray:uint16) has column_size 32 but its "
            "encoding's size is variable (null)");
  EXPECT_EQ(IndexError([](json& j) {
              j["shards"][0]["column_encodings"][0] = "ndarray:uint16:16";
              j["shards"][0]["column_sizes"][0] = 16;
            }),
            "w: index.json shard 0: column 'tokens' (ndarray:uint16:16) has column_size 16 but its "
            "encoding's size is 32");
  EXPECT_EQ(IndexError([](json& j) { j["shards"][0]["column_encodings"][0] = "int32"; }),
            "w: index.json shard 0: column 'tokens' (int32) has column_size null but its "
            "encoding's size is 4");
  EXPECT_HAS(IndexError([](json& j) { j["shards"][0]["column_sizes"] = json::array(); }),
             "column_names, column_encodings and column_sizes must be lists of one length");
}

TEST(MdsIndexTest, UnknownEncoding) {
  EXPECT_HAS(IndexError([](json& j) { j["shards"][0]["column_encodings"][0] = "ndarray:int33"; }),
             "w: index.json shard 0: column 'tokens': encoding 'ndarray:int33' is not an MDS "
             "encoding");
  EXPECT_HAS(IndexError([](json& j) { j["shards"][1]["column_encodings"][0] = "tensor"; }),
             "column 'tokens': encoding 'tensor' is not an MDS encoding");
}

TEST(MdsIndexTest, BasenameIsAFileName) {
  EXPECT_EQ(IndexError([](json& j) { j["shards"][0]["raw_data"]["basename"] = "../shard.mds"; }),
            "w: index.json shard 0: raw_data: basename is missing or not a file name in the split "
            "folder");
  for (const char* name : {"..", ".", "", "a/b"})
    EXPECT_HAS(IndexError([&](json& j) { j["shards"][1]["raw_data"]["basename"] = name; }),
               "raw_data: basename is missing or not a file name");
  EXPECT_HAS(IndexError([](json& j) {
               j["shards"][0]["compression"] = "zstd";
               j["shards"][0]["zip_data"] = {{"basename", "/abs.zstd"}, {"bytes", 1}};
             }),
             "zip_data: basename is missing or not a file name");
}

TEST(MdsIndexTest, CountsAndConsistency) {
  EXPECT_HAS(IndexError([](json& j) { j["shards"][0]["samples"] = -1; }),
             "samples is missing or out of range");
  EXPECT_HAS(IndexError([](json& j) { j["shards"][0]["raw_data"]["bytes"] = int64_t{1} << 40; }),
             "raw_data: bytes is missing or out of range");
  EXPECT_HAS(IndexError([](json& j) {
               j["shards"][0]["zip_data"] = {{"basename", "a.zstd"}, {"bytes", 1}};
             }),
             "has zip_data but no compression; index.json is inconsistent");
  EXPECT_HAS(IndexError([](json& j) {
               j["shards"][0]["raw_data"]["hashes"] = {{"sha1", 5}};
             }),
             "raw_data: hashes.sha1 is not a hex digest");
}

TEST(MdsIndexTest, EncodedSizes) {
  EXPECT_EQ(*MdsEncodedSize("int"), 8);
  EXPECT_EQ(*MdsEncodedSize("float16"), 2);
  EXPECT_EQ(*MdsEncodedSize("str"), -1);
  EXPECT_EQ(*MdsEncodedSize("bytes"), -1);
  EXPECT_EQ(*MdsEncodedSize("ndarray"), -1);
  EXPECT_EQ(*MdsEncodedSize("ndarray:int32"), -1);
  EXPECT_EQ(*MdsEncodedSize("ndarray:int32:16,8"), 512);
  for (const char* bad : {"ndarray:", "ndarray:int32:0", "ndarray:int32:4,", "ndarray:int32:4:2",
                          "ndarrays", "int128", "Str", "ndarray:int32:-4"})
    EXPECT_FALSE(MdsEncodedSize(bad).ok()) << bad;
}

// ---- a raw shard's header, by hand ---------------------------------------------------------

// A raw shard of `samples` (each a sample's bytes) after `config`, as MDSWriter lays it out.
std::string RawShard(const std::vector<std::string>& samples, const std::string& config = "{}") {
  std::string out(4 + 4 * (samples.size() + 1), '\0');
  PutU32(out, 0, static_cast<uint32_t>(samples.size()));
  uint32_t at = static_cast<uint32_t>(out.size() + config.size());
  for (size_t i = 0; i <= samples.size(); ++i) {
    PutU32(out, 4 + 4 * i, at);
    if (i < samples.size()) at += static_cast<uint32_t>(samples[i].size());
  }
  out += config;
  for (const std::string& s : samples) out += s;
  return out;
}

TEST(MdsShardTest, CheckOffsets) {
  MdsShardEntry entry;
  entry.samples = 3;
  std::vector<int64_t> offsets;
  std::string shard = RawShard({"aaaa", "", "bb"});
  ASSERT_TRUE(CheckMdsShard(shard, entry, "s", offsets).ok());
  EXPECT_EQ(offsets, (std::vector<int64_t>{22, 26, 26, 28}));
  EXPECT_EQ(CheckMdsShard(shard.substr(0, 10), entry, "s", offsets).message(),
            "s: 10 bytes end inside its offset table of 4 entries (truncated?)");
  EXPECT_EQ(CheckMdsShard("ab", entry, "s", offsets).message(), "s: 2 bytes hold no MDS header");
  EXPECT_EQ(CheckMdsShard(shard + "x", entry, "s", offsets).message(),
            "s: its offset table ends at byte 28 but the shard has 29 (offset table damaged)");
  entry.samples = 4;
  EXPECT_EQ(CheckMdsShard(shard, entry, "s", offsets).message(),
            "s: holds 3 samples but index.json says 4");
}

TEST(MdsShardTest, ColumnBytes) {
  MdsShardEntry entry;
  entry.columns = {{"id", "int", 8}, {"text", "str", -1}, {"tokens", "ndarray:int32", -1}};
  std::string sample(8, '\0');
  PutU32(sample, 0, 3);
  PutU32(sample, 4, 8);
  sample += std::string(8, 'i') + "abc" + std::string(8, 't');
  EXPECT_EQ(*MdsColumnBytes(sample, entry, 0), std::string(8, 'i'));
  EXPECT_EQ(*MdsColumnBytes(sample, entry, 1), "abc");
  EXPECT_EQ(*MdsColumnBytes(sample, entry, 2), std::string(8, 't'));
  EXPECT_EQ(MdsColumnBytes(sample.substr(0, 7), entry, 2).status().message(),
            "7 bytes end inside its column sizes");
  EXPECT_EQ(MdsColumnBytes(sample.substr(0, 26), entry, 2).status().message(),
            "column 'tokens' of 8 bytes runs past the sample's end (26 bytes)");
  PutU32(sample, 0, 0xffffffffu);
  EXPECT_EQ(MdsColumnBytes(sample, entry, 2).status().message(),
            "column 'text' of 4294967295 bytes runs past the sample's end (27 bytes)");
}

// ---- hashes ------------------------------------------------------------------------------------

// The outside reference: digests of "abc" computed with Python (/usr/bin/python3, hashlib and
// python3-xxhash 3.2), e.g. hashlib.sha1(b"abc").hexdigest(), xxhash.xxh3_64(b"abc").hexdigest().
TEST(MdsHashTest, HexDigestsOfAbc) {
  const std::vector<std::pair<std::string, std::string>> known = {
      {"sha1", "a9993e364706816aba3e25717850c26c9cd0d89d"},
      {"sha256", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"md5", "900150983cd24fb0d6963f7d28e17f72"},
      {"xxh32", "32d153ff"},
      {"xxh64", "44bc2cf5ad770999"},
      {"xxh3_64", "78af5f94892f3950"},
      {"xxh128", "06b05ab6733a618578af5f94892f3950"},
      {"xxh3_128", "06b05ab6733a618578af5f94892f3950"},  // xxhash's other name of xxh128
  };
  for (const auto& [algo, digest] : known) {
    auto got = MdsHexDigest(algo, "abc");
    ASSERT_TRUE(got.ok()) << algo << ": " << got.status().message();
    EXPECT_EQ(*got, digest) << algo;
  }
  EXPECT_EQ(MdsHexDigest("crc32", "abc").status().message(),
            "hash 'crc32' is not one foundry computes");
  EXPECT_FALSE(MdsHexDigest("shake_128", "abc").ok());
}

TEST(MdsHashTest, VerifyTheFastestKnown) {
  using Hashes = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(MdsHashToVerify({}), "");
  EXPECT_EQ(MdsHashToVerify(Hashes{{"sha1", ""}, {"xxh64", ""}}), "xxh64");
  EXPECT_EQ(MdsHashToVerify(Hashes{{"md5", ""}, {"sha256", ""}, {"xxh3_64", ""}}), "xxh3_64");
  EXPECT_EQ(MdsHashToVerify(Hashes{{"xxh32", ""}, {"xxh128", ""}}), "xxh128");
  EXPECT_EQ(MdsHashToVerify(Hashes{{"sha1", ""}, {"xxh3_128", ""}}), "xxh3_128");
  EXPECT_EQ(MdsHashToVerify(Hashes{{"xxh3_128", ""}}), "xxh3_128");
  EXPECT_EQ(MdsHashToVerify(Hashes{{"xxh32", ""}, {"md5", ""}}), "xxh32");
  EXPECT_EQ(MdsHashToVerify(Hashes{{"md5", ""}, {"sha256", ""}, {"sha1", ""}}), "sha1");
  EXPECT_EQ(MdsHashToVerify(Hashes{{"md5", ""}, {"sha256", ""}}), "sha256");
  // Other hashlib names OpenSSL knows; unknown ones are not verified.
  EXPECT_EQ(MdsHashToVerify(Hashes{{"nohash", ""}, {"sha512", ""}}), "sha512");
  EXPECT_EQ(MdsHashToVerify(Hashes{{"nohash", ""}, {"shake_128", ""}}), "");
}

// ---- the order ---------------------------------------------------------------------------------

std::vector<int64_t> Epoch(const MdsOrder& order, int64_t epoch) {
  std::vector<int64_t> out;
  for (int64_t q = 0; q < order.epoch_samples(); ++q)
    out.push_back(order.Sample(epoch * order.epoch_samples() + q));
  return out;
}

TEST(MdsOrderTest, UnshuffledIsIndexOrder) {
  MdsOrder order({0, 10, 25, 40}, 40, false, 7, 8);
  for (int64_t p = 0; p < 40; ++p) EXPECT_EQ(order.Sample(p), p);
  EXPECT_EQ(order.Sample(40), 0);
  EXPECT_EQ(order.Sample(123), 3);
  MdsOrder dropped({0, 10, 25, 40}, 32, false, 7, 8);  // drop_last: 8 samples never read
  EXPECT_EQ(dropped.Sample(31), 31);
  EXPECT_EQ(dropped.Sample(32), 0);
}

struct Layout {
  std::vector<int64_t> starts;
  int64_t block, epoch_samples;
};

std::vector<Layout> Layouts() {
  return {{{0, 40}, 1000, 40},         {{0, 40}, 6, 33},         {{0, 10, 25, 40}, 1, 40},
          {{0, 10, 25, 40}, 4, 40},    {{0, 10, 25, 40}, 7, 35}, {{0, 7, 7, 20, 33}, 5, 33},
          {{0, 7, 7, 20, 33}, 64, 30}, {{0, 3, 6, 9, 12}, 3, 12}};
}

// Each epoch reads epoch_samples distinct samples (every sample when it is all of them).
TEST(MdsOrderTest, EachEpochReadsDistinctSamples) {
  for (const Layout& l : Layouts())
    for (int64_t epoch : {0, 1, 5}) {
      MdsOrder order(l.starts, l.epoch_samples, true, 17, l.block);
      const std::vector<int64_t> e = Epoch(order, epoch);
      const std::set<int64_t> distinct(e.begin(), e.end());
      EXPECT_EQ(distinct.size(), static_cast<size_t>(l.epoch_samples)) << l.block;
      EXPECT_GE(*distinct.begin(), 0);
      EXPECT_LT(*distinct.rbegin(), l.starts.back());
    }
}

TEST(MdsOrderTest, SeedAndEpochDecide) {
  for (const Layout& l : Layouts()) {
    MdsOrder a(l.starts, l.epoch_samples, true, 17, l.block),
        b(l.starts, l.epoch_samples, true, 17, l.block),
        other(l.starts, l.epoch_samples, true, 18, l.block);
    EXPECT_EQ(Epoch(a, 0), Epoch(b, 0));
    EXPECT_EQ(Epoch(a, 3), Epoch(b, 3));
    // Blocks of 3 or more samples leave more orders than a fixed seed could collide in.
    if (l.block >= 3) {
      EXPECT_NE(Epoch(a, 0), Epoch(other, 0)) << l.block;
      EXPECT_NE(Epoch(a, 0), Epoch(a, 1)) << l.block;
    }
  }
}

// Blocks of one sample permute only the shards: each shard is read whole, in index order.
TEST(MdsOrderTest, BlockOfOneReadsWholeShards) {
  const std::vector<int64_t> starts = {0, 10, 25, 40};
  std::set<std::vector<int64_t>> orders;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const std::vector<int64_t> e = Epoch(MdsOrder(starts, 40, true, seed, 1), 0);
    std::vector<int64_t> shard_order;
    for (size_t p = 0; p < e.size();) {
      const size_t s = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), e[p]) -
                                           starts.begin() - 1);
      ASSERT_EQ(e[p], starts[s]) << "a shard read from its start";
      for (int64_t i = starts[s]; i < starts[s + 1]; ++i, ++p) ASSERT_EQ(e[p], i);
      shard_order.push_back(static_cast<int64_t>(s));
    }
    orders.insert(shard_order);
  }
  EXPECT_GT(orders.size(), 1u);  // the shard order does change with the seed
  // One shard and blocks of one: nothing to shuffle.
  const std::vector<int64_t> one = Epoch(MdsOrder({0, 12}, 12, true, 3, 1), 2);
  EXPECT_EQ(one, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

// A block holds the samples of the same `block` positions of the shard-ordered sequence (the one
// blocks of one read), permuted; a block as large as the split shuffles it all.
TEST(MdsOrderTest, BlocksPermuteTheShardOrder) {
  const std::vector<int64_t> starts = {0, 7, 7, 20, 33};
  for (int64_t block : {2, 5, 13, 33, 100})
    for (int64_t epoch : {0, 2}) {
      const std::vector<int64_t> sequence = Epoch(MdsOrder(starts, 33, true, 5, 1), epoch);
      const std::vector<int64_t> e = Epoch(MdsOrder(starts, 33, true, 5, block), epoch);
      for (int64_t b = 0; b * block < 33; ++b) {
        const int64_t end = std::min<int64_t>(33, (b + 1) * block);
        EXPECT_EQ(std::multiset<int64_t>(e.begin() + b * block, e.begin() + end),
                  std::multiset<int64_t>(sequence.begin() + b * block, sequence.begin() + end))
            << "block " << block << " #" << b;
      }
      EXPECT_NE(e, sequence) << block;
    }
  // One shard, one block of it all: a full shuffle, not the index order.
  const std::vector<int64_t> full = Epoch(MdsOrder({0, 40}, 40, true, 9, 40), 0);
  std::vector<int64_t> sorted = full;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(full, sorted);
  EXPECT_EQ(sorted.front(), 0);
  EXPECT_EQ(sorted.back(), 39);
}

// Position epoch * epoch_samples + q is sample q of that epoch's order, however the positions are
// visited (the order keeps only the current epoch and block).
TEST(MdsOrderTest, PositionsWrapIntoTheNextEpoch) {
  const std::vector<int64_t> starts = {0, 10, 25, 40};
  const MdsOrder order(starts, 35, true, 11, 7);
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t e = 0; e < 3; ++e) epochs.push_back(Epoch(MdsOrder(starts, 35, true, 11, 7), e));
  for (int64_t p : {0, 36, 34, 35, 104, 1, 70, 69, 8, 77, 14, 41})
    EXPECT_EQ(order.Sample(p), epochs[static_cast<size_t>(p / 35)][static_cast<size_t>(p % 35)])
        << p;
}

// Shards grouped by raw bytes (what the reader can hold decompressed): a block never spans
// shards of two groups, however many samples it may hold; without a bound, the order is the one
// of blocks alone.
TEST(MdsOrderTest, GroupsBoundTheShardsABlockSpans) {
  const std::vector<int64_t> starts = {0, 10, 20, 30, 40, 50}, bytes = {100, 100, 100, 100, 100};
  auto shard = [&](int64_t sample) {
    return std::upper_bound(starts.begin(), starts.end(), sample) - starts.begin() - 1;
  };
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    const std::vector<int64_t> e =
        Epoch(MdsOrder(starts, 50, true, 7, 1000, bytes, /*group_bytes=*/250), epoch);
    EXPECT_EQ(std::set<int64_t>(e.begin(), e.end()).size(), 50u);
    // Groups of two shards (200 bytes), two shards and one: 20, 20 and 10 positions.
    for (auto [begin, end, shards] :
         {std::tuple{0, 20, 2}, std::tuple{20, 40, 2}, std::tuple{40, 50, 1}}) {
      std::set<int64_t> seen;
      for (int64_t p = begin; p < end; ++p) seen.insert(shard(e[static_cast<size_t>(p)]));
      EXPECT_EQ(seen.size(), static_cast<size_t>(shards)) << epoch << " " << begin;
    }
  }
  EXPECT_EQ(Epoch(MdsOrder(starts, 50, true, 7, 13, bytes, 0), 1),
            Epoch(MdsOrder(starts, 50, true, 7, 13), 1));
  // A shard larger than the bound is a group of its own.
  const std::vector<int64_t> big = Epoch(MdsOrder(starts, 50, true, 7, 1000, bytes, 50), 0);
  for (int64_t p = 0; p < 50; p += 10)
    for (int64_t i = 1; i < 10; ++i)
      EXPECT_EQ(shard(big[static_cast<size_t>(p + i)]), shard(big[static_cast<size_t>(p)]));
}

TEST(MdsOrderTest, PhiloxBelowStaysBelow) {
  std::vector<int> seen(7, 0);
  for (uint64_t c = 0; c < 700; ++c) {
    const uint64_t v = PhiloxBelow(3, 4, c, 7);
    ASSERT_LT(v, 7u);
    ++seen[v];
  }
  for (int n : seen) EXPECT_GT(n, 50);  // about 100 each
  EXPECT_EQ(PhiloxBelow(3, 4, 5, 1), 0u);
  EXPECT_EQ(PhiloxBelow(3, 4, 5, 1000), PhiloxBelow(3, 4, 5, 1000));
  EXPECT_NE(PhiloxBelow(3, 4, 5, uint64_t{1} << 40), PhiloxBelow(3, 4, 6, uint64_t{1} << 40));
}

// ---- decoding, by hand -------------------------------------------------------------------------

MdsTokenCodec Codec(const std::string& encoding, const std::string& token_encoding_type = "int64") {
  auto codec = MdsTokenCodecOf({"tokens", encoding, -1}, token_encoding_type);
  EXPECT_TRUE(codec.ok()) << encoding << ": " << codec.status().message();
  return codec.ok() ? *codec : MdsTokenCodec{};
}

template <class T>
std::string Le(std::initializer_list<T> values) {
  std::string out;
  for (T v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
  return out;
}

// The ids of `bytes` (none when it fails; `error` gets the message, "" on success).
std::vector<int64_t> Decode(const MdsTokenCodec& codec, const std::string& bytes,
                            std::string* error = nullptr) {
  std::vector<int64_t> ids;
  std::string e;
  const bool ok = DecodeMdsTokens(codec, bytes, ids, e);
  if (error) *error = ok ? "" : e;
  EXPECT_EQ(ok, e.empty()) << e;
  return ok ? ids : std::vector<int64_t>{};
}

std::string DecodeError(const MdsTokenCodec& codec, const std::string& bytes) {
  std::string e;
  Decode(codec, bytes, &e);
  return e;
}

TEST(MdsDecodeTest, Codecs) {
  EXPECT_EQ(Codec("ndarray").header, MdsTokenCodec::Header::kDtypeAndShape);
  EXPECT_EQ(Codec("ndarray:int16").header, MdsTokenCodec::Header::kShape);
  EXPECT_EQ(Codec("ndarray:uint32:16").header, MdsTokenCodec::Header::kNone);
  EXPECT_EQ(Codec("bytes", "uint16").describe, "bytes of uint16");
  EXPECT_HAS(MdsTokenCodecOf({"t", "ndarray:float16", -1}, "int64").status().message(),
             "column 't' (ndarray:float16) holds float16 values; token ids are integers");
  EXPECT_HAS(MdsTokenCodecOf({"t", "int", 8}, "int64").status().message(),
             "column 't' (int) is not a token column");
  EXPECT_HAS(MdsTokenCodecOf({"t", "str", -1}, "int64").status().message(),
             "(a str column is text; foundry does not tokenize)");
  EXPECT_HAS(MdsTokenCodecOf({"t", "bytes", -1}, "float64").status().message(),
             "token_encoding_type 'float64' is not one of");
  EXPECT_FALSE(MdsTokenCodecOf({"t", "bytes", -1}, "").ok());
}

// streaming's dynamic ndarray: [dtype code] [ndim << 2 | shape width code] [shape] [values].
TEST(MdsDecodeTest, DynamicDtypeAndShape) {
  const MdsTokenCodec codec = Codec("ndarray");
  // int32 (code 33), one dimension of 3 as uint8 (code 0).
  EXPECT_EQ(Decode(codec, std::string("\x21\x04\x03", 3) + Le<int32_t>({1, -2, 70000})),
            (std::vector<int64_t>{1, -2, 70000}));
  // uint16 (16), shape (2, 2) as uint16 (code 1): 4 ids, flattened.
  EXPECT_EQ(Decode(codec, std::string("\x10\x09", 2) + Le<uint16_t>({2, 2, 65535, 1, 7, 0})),
            (std::vector<int64_t>{65535, 1, 7, 0}));
  // int64 (65), shape as uint64 (code 3).
  EXPECT_EQ(Decode(codec, std::string("\x41\x07", 2) + Le<uint64_t>({1}) + Le<int64_t>({-9})),
            (std::vector<int64_t>{-9}));
  EXPECT_EQ(DecodeError(codec, ""), "its ndarray dtype code is not one of streaming's");
  EXPECT_EQ(DecodeError(codec, std::string("\x07\x04\x01", 3) + "x"),
            "its ndarray dtype code is not one of streaming's");
  EXPECT_EQ(DecodeError(codec, std::string("\x22\x04\x01", 3) + Le<float>({1.0f})),
            "it holds float32 values; token ids are integers");
}

TEST(MdsDecodeTest, StaticDtypeWithShape) {
  const MdsTokenCodec codec = Codec("ndarray:int16");
  EXPECT_EQ(Decode(codec, std::string("\x04\x02", 2) + Le<int16_t>({-5, 300})),
            (std::vector<int64_t>{-5, 300}));
  EXPECT_EQ(DecodeError(codec, ""), "its ndarray header is cut off");
  EXPECT_EQ(DecodeError(codec, std::string("\x00", 1) + Le<int16_t>({1})),
            "its ndarray has no dimensions");
  EXPECT_EQ(DecodeError(codec, std::string("\x09\x02", 2)), "its ndarray shape is cut off");
  EXPECT_EQ(DecodeError(codec, std::string("\x04\x02", 2) + "abc"),
            "3 bytes of ids are not whole 2-byte values");
}

// The shape must hold the values there are (streaming's decode reshapes to it).
TEST(MdsDecodeTest, ShapeAgreesWithTheValues) {
  const MdsTokenCodec codec = Codec("ndarray:int16");
  EXPECT_EQ(Decode(codec, std::string("\x08\x02\x03", 3) + Le<int16_t>({1, 2, 3, 4, 5, 6})),
            (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(DecodeError(codec, std::string("\x04\x03", 2) + Le<int16_t>({-5, 300})),
            "its ndarray shape (3) holds 3 values but it has 2");
  EXPECT_EQ(DecodeError(codec, std::string("\x08\x02\x03", 3) + Le<int16_t>({1, 2, 3, 4, 5})),
            "its ndarray shape (2, 3) holds 6 values but it has 5");
  // Dimensions whose product overflows 64 bits.
  EXPECT_EQ(DecodeError(codec, std::string("\x0b", 1) + Le<uint64_t>({1ull << 40, 1ull << 40})),
            "its ndarray shape (1099511627776, 1099511627776) holds more values than it has (0)");
  EXPECT_EQ(DecodeError(Codec("ndarray"), std::string("\x21\x04\x02", 3) + Le<int32_t>({7})),
            "its ndarray shape (2) holds 2 values but it has 1");
}

TEST(MdsDecodeTest, SignedAndUnsigned) {
  const std::string bytes("\xff\x80\x01\x7f", 4);
  EXPECT_EQ(Decode(Codec("ndarray:int8:4"), bytes), (std::vector<int64_t>{-1, -128, 1, 127}));
  EXPECT_EQ(Decode(Codec("ndarray:uint8:4"), bytes), (std::vector<int64_t>{255, 128, 1, 127}));
  EXPECT_EQ(Decode(Codec("bytes", "int16"), bytes), (std::vector<int64_t>{-32513, 32513}));
  EXPECT_EQ(Decode(Codec("bytes", "uint32"), bytes), (std::vector<int64_t>{2130804991}));
  EXPECT_EQ(Decode(Codec("bytes", "uint32"), Le<uint32_t>({4294967295u})),
            (std::vector<int64_t>{4294967295}));
  EXPECT_EQ(Decode(Codec("bytes", "int32"), Le<int32_t>({-70000})), (std::vector<int64_t>{-70000}));
  EXPECT_EQ(DecodeError(Codec("bytes", "int64"), "1234567"),
            "7 bytes of ids are not whole 8-byte values");
  EXPECT_EQ(Decode(Codec("bytes", "int64"), ""), (std::vector<int64_t>{}));
}

// A uint64 id above INT64_MAX reads as a negative id (outside every vocabulary).
TEST(MdsDecodeTest, Uint64AboveInt64Max) {
  const std::string bytes = Le<uint64_t>({uint64_t{1} << 63, ~uint64_t{0}, 5});
  const std::vector<int64_t> want = {INT64_MIN, -1, 5};
  EXPECT_EQ(Decode(Codec("bytes", "uint64"), bytes), want);
  EXPECT_EQ(Decode(Codec("ndarray:uint64:3"), bytes), want);
  EXPECT_EQ(Decode(Codec("ndarray"), std::string("\x40\x04\x03", 3) + bytes), want);
}

#undef EXPECT_HAS

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
