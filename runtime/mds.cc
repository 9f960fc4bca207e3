#include "runtime/mds.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "base/quote.h"
#include "kernels/cpu/philox.h"

namespace foundry {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Text from index.json in a message: names and strings escaped (a newline in a column name must
// not split the one-line error) and clipped; a JSON value shown without recursing into it (a
// 40,000-deep array must not overflow the stack, a long one must not make a 20 KB message).
std::string MdsText(std::string_view s) { return EscapeName(Clip(s, 120)); }
std::string MdsQuoted(std::string_view s) { return QuoteName(Clip(s, 120)); }
std::string MdsShown(const json& v) {
  const std::string n = std::to_string(v.size());
  if (v.is_array()) return "an array of " + n + (v.size() == 1 ? " value" : " values");
  if (v.is_object()) return "an object of " + n + (v.size() == 1 ? " key" : " keys");
  return Clip(v.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace), 80);
}

uint32_t LoadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian hosts only (x86-64, aarch64)
  return v;
}

// streaming's MDS encodings: the fixed-size ones with their sizes, then the variable-size ones.
// clang-format off
const std::map<std::string, int64_t>& FixedEncodings() {
  static const std::map<std::string, int64_t> m = {
      {"int", 8}, {"uint8", 1}, {"uint16", 2}, {"uint32", 4}, {"uint64", 8}, {"int8", 1},
      {"int16", 2}, {"int32", 4}, {"int64", 8}, {"float16", 2}, {"float32", 4}, {"float64", 8}};
  return m;
}
const std::vector<std::string>& VariableEncodings() {
  static const std::vector<std::string> v = {"bytes", "str", "json", "pkl", "jpeg", "png", "PIL",
                                             "jpegarray", "str_int", "str_float", "str_decimal",
                                             "list[str]", "list[pil]", "list[jpeg]", "list[png]"};
  return v;
}
// ndarray value dtypes: name -> (width, signed, is integer); streaming's dtype codes.
struct ValueType { int width; bool is_signed, integer; };
const std::map<std::string, ValueType>& NdarrayTypes() {
  static const std::map<std::string, ValueType> m = {
      {"uint8", {1, false, true}},  {"int8", {1, true, true}},   {"uint16", {2, false, true}},
      {"int16", {2, true, true}},   {"float16", {2, true, false}}, {"uint32", {4, false, true}},
      {"int32", {4, true, true}},   {"float32", {4, true, false}}, {"uint64", {8, false, true}},
      {"int64", {8, true, true}},   {"float64", {8, true, false}}};
  return m;
}
const std::map<int, std::string>& NdarrayCodes() {
  static const std::map<int, std::string> m = {
      {8, "uint8"}, {9, "int8"}, {16, "uint16"}, {17, "int16"}, {18, "float16"}, {32, "uint32"},
      {33, "int32"}, {34, "float32"}, {64, "uint64"}, {65, "int64"}, {66, "float64"}};
  return m;
}
// clang-format on

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(begin, i - begin));
      begin = i + 1;
    }
  return parts;
}

// "ndarray:int32:16,8" -> dtype "int32", shape elements 128 (0 when no shape); false when
// malformed.
bool ParseNdarray(const std::string& encoding, std::string& dtype, int64_t& elements) {
  std::vector<std::string> parts = Split(encoding, ':');
  if (parts[0] != "ndarray" || parts.size() > 3) return false;
  dtype = parts.size() > 1 ? parts[1] : "";
  elements = 0;
  if (parts.size() > 1 && !NdarrayTypes().count(dtype)) return false;
  if (parts.size() < 3) return true;
  elements = 1;
  for (const std::string& d : Split(parts[2], ',')) {
    if (d.empty() || d.size() > 12 || d.find_first_not_of("0123456789") != std::string::npos)
      return false;
    const int64_t n = std::stoll(d);
    if (n < 1 || elements > (int64_t{1} << 40) / n) return false;
    elements *= n;
  }
  return true;
}

bool PlainBasename(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos && name.size() < 256;
}

// A non-negative integer field below 2^40 (shard sizes and counts are far below).
bool GetCount(const json& obj, const char* key, int64_t& out) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return false;
  const int64_t v = it->get<int64_t>();
  if (v < 0 || v >= (int64_t{1} << 40)) return false;
  out = v;
  return true;
}

Status ParseFile(const json& j, const std::string& where, const char* key, MdsFile& f) {
  const std::string at = where + key + ": ";
  if (!j.is_object()) return Error(at + "is not an object with basename, bytes and hashes");
  auto name = j.find("basename");
  if (name == j.end() || !name->is_string() || !PlainBasename(name->get<std::string>()))
    return Error(at + "basename is missing or not a file name in the split folder");
  f.basename = name->get<std::string>();
  if (!GetCount(j, "bytes", f.bytes)) return Error(at + "bytes is missing or out of range");
  auto hashes = j.find("hashes");
  if (hashes != j.end() && !hashes->is_null()) {
    if (!hashes->is_object()) return Error(at + "hashes is not an object of hex digests");
    for (const auto& [algo, digest] : hashes->items()) {
      if (!digest.is_string())
        return Error(at + "hashes." + MdsText(algo) + " is not a hex digest");
      f.hashes.emplace_back(algo, digest.get<std::string>());
    }
  }
  return Status::Ok();
}

Status ParseColumns(const json& e, const std::string& at, MdsShardEntry& s) {
  auto names = e.find("column_names"), encodings = e.find("column_encodings"),
       sizes = e.find("column_sizes");
  if (names == e.end() || encodings == e.end() || sizes == e.end() || !names->is_array() ||
      !encodings->is_array() || !sizes->is_array() || names->size() != encodings->size() ||
      names->size() != sizes->size() || names->empty() || names->size() > 4096)
    return Error(at +
                 "column_names, column_encodings and column_sizes must be lists of one "
                 "length (1 to 4096)");
  for (size_t c = 0; c < names->size(); ++c) {
    const json &n = (*names)[c], &enc = (*encodings)[c], &sz = (*sizes)[c];
    if (!n.is_string() || !enc.is_string())
      return Error(at + "column " + std::to_string(c) + "'s name or encoding is not a string");
    MdsColumn col{n.get<std::string>(), enc.get<std::string>(), -1};
    StatusOr<int64_t> size = MdsEncodedSize(col.encoding);
    if (!size.ok())
      return Error(at + "column " + MdsQuoted(col.name) + ": " + size.status().message());
    if (!sz.is_null() && (!sz.is_number_integer() || sz.get<int64_t>() != *size))
      return Error(at + "column " + MdsQuoted(col.name) + " (" + MdsText(col.encoding) +
                   ") has column_size " + MdsShown(sz) + " but its encoding's size is " +
                   (*size < 0 ? "variable (null)" : std::to_string(*size)));
    if (sz.is_null() && *size >= 0)
      return Error(at + "column " + MdsQuoted(col.name) + " (" + MdsText(col.encoding) +
                   ") has column_size null but its encoding's size is " + std::to_string(*size));
    col.size = *size;
    s.columns.push_back(std::move(col));
  }
  return Status::Ok();
}

Status ParseEntry(const json& e, const std::string& at, MdsShardEntry& s) {
  if (!e.is_object()) return Error(at + "is not an object");
  auto format = e.find("format");
  if (format == e.end() || !format->is_string() || format->get<std::string>() != "mds")
    return Error(at + "format is " + (format == e.end() ? "missing" : MdsShown(*format)) +
                 "; foundry reads MDS shards (format \"mds\")");
  auto version = e.find("version");
  if (version != e.end() && (!version->is_number_integer() || version->get<int64_t>() != 2))
    return Error(at + "version " + MdsShown(*version) + " is not MDS version 2");
  RETURN_IF_ERROR(ParseColumns(e, at, s));
  auto compression = e.find("compression");
  if (compression != e.end() && !compression->is_null()) {
    if (!compression->is_string()) return Error(at + "compression is not a string or null");
    s.compression = Split(compression->get<std::string>(), ':')[0];
  }
  if (!GetCount(e, "samples", s.samples)) return Error(at + "samples is missing or out of range");
  auto raw = e.find("raw_data");
  if (raw == e.end()) return Error(at + "raw_data is missing");
  RETURN_IF_ERROR(ParseFile(*raw, at, "raw_data", s.raw));
  if (s.raw.bytes > int64_t{UINT32_MAX})
    return Error(at + "raw_data: bytes " + std::to_string(s.raw.bytes) +
                 " is past what a shard's uint32 offsets address (4 GiB)");
  auto zip = e.find("zip_data");
  if (zip != e.end() && !zip->is_null()) {
    s.zip.emplace();
    RETURN_IF_ERROR(ParseFile(*zip, at, "zip_data", *s.zip));
    if (s.compression.empty())
      return Error(at + "has zip_data but no compression; index.json is inconsistent");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<int64_t> MdsEncodedSize(const std::string& encoding) {
  auto fixed = FixedEncodings().find(encoding);
  if (fixed != FixedEncodings().end()) return fixed->second;
  const auto& var = VariableEncodings();
  if (std::find(var.begin(), var.end(), encoding) != var.end()) return -1;
  std::string dtype;
  int64_t elements = 0;
  if (encoding.rfind("ndarray", 0) == 0 && ParseNdarray(encoding, dtype, elements))
    return elements > 0 ? elements * NdarrayTypes().at(dtype).width : -1;
  return Error("encoding " + QuoteName(Clip(encoding, 64)) +
               " is not an MDS encoding (bytes, str, json, int, uint8...int64, float16...64, "
               "ndarray[:DTYPE[:SHAPE]], or streaming's image and pickle encodings)");
}

StatusOr<std::vector<MdsShardEntry>> ParseMdsIndex(std::string_view text,
                                                   const std::string& where) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Error(where + ": index.json is not a JSON object; is it an MDS dataset's index?");
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || version->get<int64_t>() != 2)
    return Error(where + ": index.json version is " +
                 (version == j.end() ? std::string("missing") : MdsShown(*version)) +
                 "; foundry reads MDS index version 2 (streaming 0.4 and later)");
  auto shards = j.find("shards");
  if (shards == j.end() || !shards->is_array() || shards->empty())
    return Error(where + ": index.json lists no shards");
  std::vector<MdsShardEntry> out;
  for (size_t i = 0; i < shards->size(); ++i) {
    MdsShardEntry s;
    RETURN_IF_ERROR(
        ParseEntry((*shards)[i], where + ": index.json shard " + std::to_string(i) + ": ", s));
    out.push_back(std::move(s));
  }
  return out;
}

Status CheckMdsShard(std::string_view data, const MdsShardEntry& entry, const std::string& where,
                     std::vector<int64_t>& offsets) {
  const int64_t size = static_cast<int64_t>(data.size());
  if (size < 4) return Error(where + ": " + std::to_string(size) + " bytes hold no MDS header");
  const int64_t n = LoadU32(data.data());
  if (n != entry.samples)
    return Error(where + ": holds " + std::to_string(n) + " samples but index.json says " +
                 std::to_string(entry.samples));
  const int64_t table_end = 4 + 4 * (n + 1);
  if (size < table_end)
    return Error(where + ": " + std::to_string(size) + " bytes end inside its offset table of " +
                 std::to_string(n + 1) + " entries (truncated?)");
  offsets.resize(static_cast<size_t>(n + 1));
  for (int64_t i = 0; i <= n; ++i)
    offsets[static_cast<size_t>(i)] = LoadU32(data.data() + 4 + 4 * i);
  if (offsets[0] < table_end)
    return Error(where + ": its first sample starts at byte " + std::to_string(offsets[0]) +
                 ", inside the header (offset table damaged)");
  for (int64_t i = 0; i < n; ++i)
    if (offsets[static_cast<size_t>(i + 1)] < offsets[static_cast<size_t>(i)])
      return Error(where + ": sample " + std::to_string(i) + " ends at byte " +
                   std::to_string(offsets[static_cast<size_t>(i + 1)]) + ", before it starts at " +
                   std::to_string(offsets[static_cast<size_t>(i)]) + " (offset table damaged)");
  if (offsets.back() != size)
    return Error(where + ": its offset table ends at byte " + std::to_string(offsets.back()) +
                 " but the shard has " + std::to_string(size) +
                 (offsets.back() > size ? " (truncated, or the table points outside the file)"
                                        : " (offset table damaged)"));
  return Status::Ok();
}

StatusOr<std::string_view> MdsColumnBytes(std::string_view sample, const MdsShardEntry& entry,
                                          size_t column) {
  size_t head = 0;
  for (const MdsColumn& c : entry.columns) head += c.size < 0 ? 4 : 0;
  if (sample.size() < head)
    return Error(std::to_string(sample.size()) + " bytes end inside its column sizes");
  size_t at = head, var = 0;
  for (size_t c = 0; c < entry.columns.size(); ++c) {
    const int64_t fixed = entry.columns[c].size;
    const uint64_t size =
        fixed >= 0 ? static_cast<uint64_t>(fixed) : LoadU32(sample.data() + 4 * var++);
    if (size > sample.size() - at)
      return Error("column " + MdsQuoted(entry.columns[c].name) + " of " + std::to_string(size) +
                   " bytes runs past the sample's end (" + std::to_string(sample.size()) +
                   " bytes)");
    if (c == column) return sample.substr(at, size);
    at += size;
  }
  return Error("no column " + std::to_string(column));
}

StatusOr<MdsTokenCodec> MdsTokenCodecOf(const MdsColumn& column,
                                        const std::string& token_encoding_type) {
  MdsTokenCodec codec;
  const std::string at = "column " + MdsQuoted(column.name) + " (" + MdsText(column.encoding) + ")";
  std::string dtype;
  int64_t elements = 0;
  if (column.encoding == "bytes") {
    auto t = NdarrayTypes().find(token_encoding_type);
    if (t == NdarrayTypes().end() || !t->second.integer)
      return Error(at + ": token_encoding_type " + MdsQuoted(token_encoding_type) +
                   " is not one of int8, int16, int32, int64, uint8, uint16, uint32, uint64");
    codec.width = t->second.width;
    codec.is_signed = t->second.is_signed;
    codec.describe = "bytes of " + token_encoding_type;
    return codec;
  }
  if (column.encoding.rfind("ndarray", 0) == 0 && ParseNdarray(column.encoding, dtype, elements)) {
    codec.describe = column.encoding;
    if (dtype.empty()) {
      codec.header = MdsTokenCodec::Header::kDtypeAndShape;
      return codec;
    }
    const ValueType& t = NdarrayTypes().at(dtype);
    if (!t.integer)
      return Error(at + " holds " + dtype + " values; token ids are integers (int32, uint16, ...)");
    codec.width = t.width;
    codec.is_signed = t.is_signed;
    codec.header = elements > 0 ? MdsTokenCodec::Header::kNone : MdsTokenCodec::Header::kShape;
    return codec;
  }
  return Error(
      at +
      " is not a token column: foundry trains on ndarray or bytes columns of "
      "integer token ids" +
      (column.encoding == "str" ? " (a str column is text; foundry does not tokenize)" : ""));
}

namespace {

int64_t LoadInt(const char* p, int width, bool is_signed) {
  switch (width) {
    // Each arm converted to int64_t on its own: `c ? int32_t : uint32_t` would be uint32_t,
    // turning a negative int32 id into 2^32 - |id|.
    case 1:
      return is_signed ? int64_t{static_cast<int8_t>(*p)} : int64_t{static_cast<uint8_t>(*p)};
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return is_signed ? int64_t{static_cast<int16_t>(v)} : int64_t{v};
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return is_signed ? int64_t{static_cast<int32_t>(v)} : int64_t{v};
    }
    default: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      // An unsigned id above INT64_MAX reads as negative: outside every vocabulary either way.
      return static_cast<int64_t>(v);
    }
  }
}

// The ndarray header of one sample: `ndim << 2 | shape width code`, then the shape. Returns the
// header's length, or 0 (with `error`) when it is malformed; `elements` gets the shape's product
// (UINT64_MAX when it overflows), and `dims` (when not null) the shape as text.
size_t ShapeHeader(std::string_view b, size_t at, std::string& error, uint64_t& elements,
                   std::string* dims = nullptr) {
  if (b.size() <= at) {
    error = "its ndarray header is cut off";
    return 0;
  }
  const unsigned char byte = static_cast<unsigned char>(b[at]);
  const size_t ndim = byte >> 2, width = size_t{1} << (byte & 3);
  if (ndim == 0 || b.size() < at + 1 + ndim * width) {
    error = ndim == 0 ? "its ndarray has no dimensions" : "its ndarray shape is cut off";
    return 0;
  }
  elements = 1;
  for (size_t d = 0; d < ndim; ++d) {
    uint64_t n = 0;
    std::memcpy(&n, b.data() + at + 1 + d * width, width);  // little-endian hosts only
    if (dims) *dims += (d ? ", " : "") + std::to_string(n);
    elements = n != 0 && elements > UINT64_MAX / n ? UINT64_MAX : elements * n;
  }
  return 1 + ndim * width;
}

}  // namespace

bool DecodeMdsTokens(const MdsTokenCodec& codec, std::string_view bytes, std::vector<int64_t>& ids,
                     std::string& error) {
  size_t at = 0;
  int width = codec.width;
  bool is_signed = codec.is_signed;
  if (codec.header == MdsTokenCodec::Header::kDtypeAndShape) {
    auto code = bytes.empty() ? NdarrayCodes().end()
                              : NdarrayCodes().find(static_cast<unsigned char>(bytes[0]));
    if (code == NdarrayCodes().end()) {
      error = "its ndarray dtype code is not one of streaming's";
      return false;
    }
    const ValueType& t = NdarrayTypes().at(code->second);
    if (!t.integer) {
      error = "it holds " + code->second + " values; token ids are integers";
      return false;
    }
    width = t.width;
    is_signed = t.is_signed;
    at = 1;
  }
  uint64_t elements = 0;
  const size_t shape_at = at;
  if (codec.header != MdsTokenCodec::Header::kNone) {
    const size_t head = ShapeHeader(bytes, at, error, elements);
    if (head == 0) return false;
    at += head;
  }
  const size_t body = bytes.size() - at;
  if (body % static_cast<size_t>(width) != 0) {
    error = std::to_string(body) + " bytes of ids are not whole " + std::to_string(width) +
            "-byte values";
    return false;
  }
  // The shape must hold the values there are: streaming's decode reshapes them to it.
  const uint64_t values = body / static_cast<size_t>(width);
  if (codec.header != MdsTokenCodec::Header::kNone && elements != values) {
    std::string dims;
    ShapeHeader(bytes, shape_at, error, elements, &dims);
    error = "its ndarray shape (" + dims + ") holds " +
            (elements == UINT64_MAX
                 ? "more values than it has (" + std::to_string(values) + ")"
                 : std::to_string(elements) + " values but it has " + std::to_string(values));
    return false;
  }
  ids.resize(body / static_cast<size_t>(width));
  const char* p = bytes.data() + at;
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = LoadInt(p + i * static_cast<size_t>(width), width, is_signed);
  return true;
}

// ---- hashes --------------------------------------------------------------------------------

namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

// hashlib's names as OpenSSL spells them.
const EVP_MD* Digest(const std::string& algorithm) {
  std::string name = algorithm;
  std::replace(name.begin(), name.end(), '_', '-');
  if (name == "blake2b") name = "BLAKE2b512";
  if (name == "blake2s") name = "BLAKE2s256";
  if (name.rfind("shake", 0) == 0) return nullptr;  // variable length: streaming refuses them too
  return EVP_get_digestbyname(name.c_str());
}

}  // namespace

std::string MdsHashToVerify(const std::vector<std::pair<std::string, std::string>>& algorithms) {
  static const char* kFastest[] = {"xxh3_64", "xxh64", "xxh128", "xxh3_128",
                                   "xxh32",   "sha1",  "sha256", "md5"};
  for (const char* want : kFastest)
    for (const auto& [algo, digest] : algorithms)
      if (algo == want) return algo;
  for (const auto& [algo, digest] : algorithms)
    if (algo.rfind("xxh", 0) != 0 && Digest(algo)) return algo;
  return "";
}

StatusOr<std::string> MdsHexDigest(const std::string& algorithm, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  if (algorithm == "xxh32") {
    XXH32_canonical_t c;
    XXH32_canonicalFromHash(&c, XXH32(data.data(), data.size(), 0));
    return Hex(c.digest, sizeof c.digest);
  }
  if (algorithm == "xxh64" || algorithm == "xxh3_64") {
    XXH64_canonical_t c;
    XXH64_canonicalFromHash(&c, algorithm == "xxh64" ? XXH64(data.data(), data.size(), 0)
                                                     : XXH3_64bits(data.data(), data.size()));
    return Hex(c.digest, sizeof c.digest);
  }
  if (algorithm == "xxh128" || algorithm == "xxh3_128") {  // one hash, two names in xxhash
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(data.data(), data.size()));
    return Hex(c.digest, sizeof c.digest);
  }
  const EVP_MD* md = Digest(algorithm);
  unsigned int n = 0;
  if (!md || !EVP_Digest(data.data(), data.size(), out, &n, md, nullptr))
    return Error("hash '" + algorithm + "' is not one foundry computes");
  return Hex(out, n);
}

// ---- the dataset ---------------------------------------------------------------------------

// Bytes of a shard: a read-only mapping of a raw file, or a decompressed copy.
struct MdsDataset::Bytes {
  std::string_view data;
  std::string owned;
  void* map = nullptr;
  size_t map_len = 0;
  Bytes() = default;
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  ~Bytes() {
    if (map) munmap(map, map_len);
  }
};

struct MdsDataset::Shard {
  MdsShardEntry entry;
  std::string path;              // the file read: raw if present, else the zip
  bool compressed = false;       // path is the zip
  std::string hash;              // the algorithm verified ("" none)
  std::vector<int64_t> offsets;  // once checked
  std::shared_ptr<const Bytes> bytes;
  bool verified = false;
  uint64_t last_use = 0;
  size_t token_column = 0;
};

namespace {

// A read-only mapping of the whole of `path`, which must have `size` bytes.
Status MapInto(const std::string& path, int64_t size, MdsDataset::Bytes& b, const std::string& at);

}  // namespace

MdsDataset::~MdsDataset() = default;

StatusOr<std::unique_ptr<MdsDataset>> MdsDataset::Open(const std::string& dir,
                                                       const std::string& where,
                                                       const std::string& token_encoding_type) {
  const fs::path index = fs::path(dir) / "index.json";
  std::error_code ec;
  if (!fs::is_regular_file(index, ec)) {
    if (!fs::is_directory(dir, ec)) return Error(where + ": " + dir + " is not a folder");
    // A dataset's root: name its splits.
    std::vector<std::string> splits;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (fs::is_regular_file(e.path() / "index.json", ec))
        splits.push_back(e.path().filename().string());
    std::sort(splits.begin(), splits.end());
    std::string hint;
    for (const std::string& s : splits)
      hint += (hint.empty() ? "; it holds the splits " : ", ") + s;
    if (!hint.empty()) hint += ": give one (" + (fs::path(dir) / splits[0]).string() + ")";
    return Error(where + ": no index.json in " + dir + " (an MDS split folder has one)" + hint);
  }
  if (fs::file_size(index, ec) > (uintmax_t{256} << 20))
    return Error(where + ": index.json is over 256 MiB; is it an MDS index?");
  std::ifstream in(index, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Error(where + ": cannot read " + index.string());
  ASSIGN_OR_RETURN(std::vector<MdsShardEntry> entries, ParseMdsIndex(text, where));
  std::unique_ptr<MdsDataset> d(new MdsDataset());
  d->dir_ = dir;
  d->where_ = where;
  RETURN_IF_ERROR(d->ChooseTokenColumn(entries[0], token_encoding_type));
  d->starts_.push_back(0);
  for (size_t s = 0; s < entries.size(); ++s) {
    auto shard = std::make_unique<Shard>();
    shard->entry = std::move(entries[s]);
    d->shards_.push_back(std::move(shard));
    RETURN_IF_ERROR(d->OpenShard(s));
    d->total_ += d->shards_[s]->entry.samples;
    d->starts_.push_back(d->total_);
  }
  if (d->total_ == 0)
    return Error(where + ": its " + std::to_string(d->shards_.size()) + " shards hold no samples");
  for (const auto& sh : d->shards_) {
    const std::string h = sh->hash.empty() ? "none" : sh->hash;
    if (d->verified_with_.find(h) == std::string::npos)
      d->verified_with_ += (d->verified_with_.empty() ? "" : "/") + h;
  }
  return d;
}

// `tokens`, else `input_ids` (the columns llm-foundry's converters write).
Status MdsDataset::ChooseTokenColumn(const MdsShardEntry& first,
                                     const std::string& token_encoding_type) {
  std::string columns;
  const MdsColumn* token = nullptr;
  for (const char* want : {"tokens", "input_ids"})
    for (const MdsColumn& c : first.columns)
      if (!token && c.name == want) token = &c;
  for (const MdsColumn& c : first.columns)
    columns += (columns.empty() ? "" : ", ") + MdsText(c.name) + " (" + MdsText(c.encoding) + ")";
  if (!token)
    return Error(where_ + ": no token column (tokens or input_ids) among its columns " +
                 Clip(columns, 600) +
                 "; foundry trains on token ids and does not tokenize text: write tokens with "
                 "llm-foundry's convert_dataset_hf.py / convert_dataset_json.py --concat_tokens N");
  token_column_ = token->name;
  auto codec = MdsTokenCodecOf(*token, token_encoding_type);
  if (!codec.ok()) return Error(where_ + ": " + codec.status().message());
  codec_ = *codec;
  if (codec_.header == MdsTokenCodec::Header::kNone && token->size >= 0)
    fixed_tokens_ = token->size / codec_.width;
  return Status::Ok();
}

Status MdsDataset::OpenShard(size_t s) {
  Shard& sh = *shards_[s];
  const MdsShardEntry& first = shards_[0]->entry;
  const std::string at = where_ + ": " + MdsText(sh.entry.raw.basename);
  bool same = sh.entry.columns.size() == first.columns.size();
  for (size_t c = 0; same && c < first.columns.size(); ++c)
    same = sh.entry.columns[c].name == first.columns[c].name &&
           sh.entry.columns[c].encoding == first.columns[c].encoding;
  if (!same)
    return Error(at + ": its columns differ from the first shard's; one split has one schema");
  for (size_t c = 0; c < sh.entry.columns.size(); ++c)
    if (sh.entry.columns[c].name == token_column_) sh.token_column = c;
  std::error_code ec;
  const fs::path raw = fs::path(dir_) / sh.entry.raw.basename;
  if (fs::exists(raw, ec)) {
    auto bytes = std::make_shared<Bytes>();
    RETURN_IF_ERROR(MapInto(raw.string(), sh.entry.raw.bytes, *bytes, at));
    RETURN_IF_ERROR(CheckMdsShard(bytes->data, sh.entry, at, sh.offsets));
    sh.path = raw.string();
    sh.hash = MdsHashToVerify(sh.entry.raw.hashes);
    sh.bytes = std::move(bytes);
    return Status::Ok();
  }
  if (!sh.entry.zip)
    return Error(at + " is missing from " + dir_ + " (index.json lists it, uncompressed)");
  const fs::path zip = fs::path(dir_) / sh.entry.zip->basename;
  const std::string zat = where_ + ": " + MdsText(sh.entry.zip->basename);
  if (!fs::exists(zip, ec))
    return Error(zat + " is missing from " + dir_ + " (nor is " + MdsText(sh.entry.raw.basename) +
                 " there)");
  if (sh.entry.compression != "zstd")
    return Error(zat + " is compressed with " + MdsQuoted(sh.entry.compression) +
                 ", which foundry does not read (it reads zstd and uncompressed shards): "
                 "rewrite the dataset with MDSWriter(compression='zstd'), or let streaming "
                 "decompress it once (it writes " +
                 MdsText(sh.entry.raw.basename) + " beside it)");
  const int64_t size = static_cast<int64_t>(fs::file_size(zip, ec));
  if (ec || size != sh.entry.zip->bytes)
    return Error(zat + " has " + std::to_string(size) + " bytes but index.json says " +
                 std::to_string(sh.entry.zip->bytes) + " (truncated or replaced?)");
  sh.path = zip.string();
  sh.compressed = true;
  sh.hash = MdsHashToVerify(sh.entry.zip->hashes);
  return Status::Ok();
}

std::vector<int64_t> MdsDataset::shard_raw_bytes() const {
  std::vector<int64_t> bytes;
  for (const auto& sh : shards_) bytes.push_back(sh->entry.raw.bytes);
  return bytes;
}

std::string MdsDataset::DescribeFormat() const {
  bool zstd = false, raw = false;
  for (const auto& sh : shards_) (sh->compressed ? zstd : raw) = true;
  return "MDS, " + std::to_string(shards_.size()) + " shard" + (shards_.size() == 1 ? "" : "s") +
         ", " + std::to_string(total_) + " samples, column " + token_column_ + " (" +
         codec_.describe + "), " +
         (zstd && raw ? "zstd and raw"
          : zstd      ? "zstd"
                      : "raw") +
         ", hashes verified: " + verified_with_;
}

namespace {

Status MapInto(const std::string& path, int64_t size, MdsDataset::Bytes& b, const std::string& at) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error(at + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error(at + " is not a regular file");
  }
  if (st.st_size != size) {
    ::close(fd);
    return Error(at + " has " + std::to_string(st.st_size) + " bytes but index.json says " +
                 std::to_string(size) + " (truncated or replaced?)");
  }
  if (size > 0) {
    void* p = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return Error(at + ": cannot map it: " + std::strerror(errno));
    }
    b.map = p;
    b.map_len = static_cast<size_t>(size);
    b.data = std::string_view(static_cast<const char*>(p), b.map_len);
  }
  ::close(fd);
  return Status::Ok();
}

Status Verify(const std::string& algorithm, const MdsFile& file, std::string_view data,
              const std::string& at) {
  if (algorithm.empty()) return Status::Ok();
  std::string want;
  for (const auto& [algo, digest] : file.hashes)
    if (algo == algorithm) want = digest;
  ASSIGN_OR_RETURN(std::string got, MdsHexDigest(algorithm, data));
  if (got != want)
    return Error(at + ": its " + algorithm + " is " + got + " but index.json says " +
                 MdsText(want) + " (the file is damaged or was replaced)");
  return Status::Ok();
}

}  // namespace

// A compressed shard read whole and decompressed, its hash checked first. The output is allocated
// whole (zstd then decodes straight into it) when raw_data.bytes is at most 1024 times the
// compressed bytes, else grown as zstd writes it: a 1 KB file whose index entry and frame header
// claim 4 GiB fails after 1 MiB, not after allocating 4 GiB. (A frame it cannot decode in one
// pass needs a window within zstd's default limit, 128 MiB: a shard over 128 MiB compressed more
// than 1024 times is refused.)
StatusOr<std::shared_ptr<const MdsDataset::Bytes>> MdsDataset::Decompress(const Shard& sh) const {
  const std::string at = where_ + ": " + MdsText(sh.entry.zip->basename);
  auto zipped = std::make_shared<Bytes>();
  RETURN_IF_ERROR(MapInto(sh.path, sh.entry.zip->bytes, *zipped, at));
  RETURN_IF_ERROR(Verify(sh.hash, *sh.entry.zip, zipped->data, at));
  const size_t want = static_cast<size_t>(sh.entry.raw.bytes);
  const unsigned long long declared =
      ZSTD_getFrameContentSize(zipped->data.data(), zipped->data.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR)
    return Error(at + " is not zstd data (its first frame's header is damaged or cut off)");
  // One frame (streaming's) declaring another size: refused before decompressing.
  if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != want &&
      ZSTD_findFrameCompressedSize(zipped->data.data(), zipped->data.size()) == zipped->data.size())
    return Error(at + " decompresses to " + std::to_string(declared) +
                 " bytes (its zstd header) but index.json says " + std::to_string(want));
  auto out = std::make_shared<Bytes>();
  std::string& o = out->owned;
  o.resize(std::min(want, zipped->data.size() * 1024 + (size_t{1} << 16)));
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!dctx) return Error(at + ": zstd cannot allocate a decompression context");
  ZSTD_inBuffer in{zipped->data.data(), zipped->data.size(), 0};
  size_t done = 0;
  char extra = 0;  // room for one byte past `want`: whether there is more
  for (;;) {
    if (done == o.size() && o.size() < want) o.resize(std::min(want, 2 * o.size()));
    ZSTD_outBuffer ob =
        done < o.size() ? ZSTD_outBuffer{o.data(), o.size(), done} : ZSTD_outBuffer{&extra, 1, 0};
    const size_t r = ZSTD_decompressStream(dctx.get(), &ob, &in);
    if (ZSTD_isError(r))
      return Error(at + ": zstd cannot decompress it (" + ZSTD_getErrorName(r) +
                   "; damaged, or raw_data.bytes is wrong)");
    if (ob.dst == &extra) {
      if (ob.pos > 0)
        return Error(at + " decompresses to more than the " + std::to_string(want) +
                     " bytes index.json says");
    } else {
      done = ob.pos;
    }
    if (r == 0 && in.pos == in.size) break;  // every frame whole, nothing left over
    if (in.pos == in.size && ob.pos < ob.size)
      return Error(at + ": its zstd data ends inside a frame (truncated?)");
  }
  if (done != want)
    return Error(at + " decompresses to " + std::to_string(done) + " bytes but index.json says " +
                 std::to_string(want));
  o.resize(done);
  out->data = out->owned;
  return std::shared_ptr<const Bytes>(std::move(out));
}

StatusOr<std::shared_ptr<const MdsDataset::Bytes>> MdsDataset::Load(size_t s) const {
  Shard& sh = *shards_[s];
  sh.last_use = ++clock_;
  if (!sh.compressed) {
    if (!sh.verified)
      RETURN_IF_ERROR(Verify(sh.hash, sh.entry.raw, sh.bytes->data,
                             where_ + ": " + MdsText(sh.entry.raw.basename)));
    sh.verified = true;
    return sh.bytes;
  }
  if (sh.bytes) return sh.bytes;
  ASSIGN_OR_RETURN(std::shared_ptr<const Bytes> bytes, Decompress(sh));
  std::vector<int64_t> offsets;
  RETURN_IF_ERROR(CheckMdsShard(bytes->data, sh.entry,
                                where_ + ": " + MdsText(sh.entry.zip->basename) + " (decompressed)",
                                offsets));
  // Room for it: the least recently read decompressed shards go first.
  const int64_t size = static_cast<int64_t>(bytes->data.size());
  while (held_bytes_ > 0 && held_bytes_ + size > kMdsCacheBytes) {
    Shard* oldest = nullptr;
    for (const auto& other : shards_)
      if (other->compressed && other->bytes && (!oldest || other->last_use < oldest->last_use))
        oldest = other.get();
    if (!oldest) break;
    held_bytes_ -= static_cast<int64_t>(oldest->bytes->data.size());
    oldest->bytes.reset();
  }
  held_bytes_ += size;
  sh.offsets = std::move(offsets);
  sh.bytes = bytes;
  return bytes;
}

Status MdsDataset::Tokens(int64_t i, std::vector<int64_t>& ids) const {
  if (i < 0 || i >= total_)
    return Error(where_ + ": sample " + std::to_string(i) + " is outside its " +
                 std::to_string(total_) + " samples");
  const size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) -
                                       starts_.begin() - 1);
  const int64_t j = i - starts_[s];
  std::shared_ptr<const Bytes> bytes;
  std::string_view sample;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(bytes, Load(s));
    const std::vector<int64_t>& off = shards_[s]->offsets;
    sample = bytes->data.substr(
        static_cast<size_t>(off[static_cast<size_t>(j)]),
        static_cast<size_t>(off[static_cast<size_t>(j + 1)] - off[static_cast<size_t>(j)]));
  }
  const Shard& sh = *shards_[s];
  const std::string at = where_ + ": sample " + std::to_string(i) + " (" +
                         MdsText(sh.entry.raw.basename) + " sample " + std::to_string(j) + "): ";
  StatusOr<std::string_view> column = MdsColumnBytes(sample, sh.entry, sh.token_column);
  if (!column.ok()) return Error(at + column.status().message());
  std::string error;
  if (!DecodeMdsTokens(codec_, *column, ids, error))
    return Error(at + "column '" + token_column_ + "' (" + codec_.describe + "): " + error);
  return Status::Ok();
}

// ---- the order -----------------------------------------------------------------------------

uint64_t PhiloxBelow(uint64_t seed, uint64_t key, uint64_t counter, uint64_t n) {
  const uint64_t hi = PhiloxRandom(seed, key, 2 * counter);
  const uint64_t lo = PhiloxRandom(seed, key, 2 * counter + 1);
  const unsigned __int128 bits = (hi << 32) | lo;
  return static_cast<uint64_t>((bits * n) >> 64);
}

MdsOrder::MdsOrder(std::vector<int64_t> shard_starts, int64_t epoch_samples, bool shuffle,
                   uint64_t seed, int64_t block, std::vector<int64_t> shard_bytes,
                   int64_t group_bytes)
    : starts_(std::move(shard_starts)),
      shard_bytes_(std::move(shard_bytes)),
      total_(starts_.back()),
      epoch_samples_(epoch_samples),
      block_(std::max<int64_t>(block, 1)),
      group_bytes_(shard_bytes_.size() + 1 == starts_.size() ? group_bytes : 0),
      shuffle_(shuffle),
      seed_(seed) {}

// The epoch's shard order, as the start of each shard's samples in the shuffled sequence.
void MdsOrder::SetEpoch(int64_t epoch) const {
  static const uint64_t key = Fnv1a("mds shard order");
  const size_t n = starts_.size() - 1;
  order_shards_.resize(n);
  for (size_t s = 0; s < n; ++s) order_shards_[s] = static_cast<int64_t>(s);
  for (size_t s = n; s > 1; --s) {
    const uint64_t counter = (static_cast<uint64_t>(epoch) << 32) + s;
    std::swap(order_shards_[s - 1], order_shards_[PhiloxBelow(seed_, key, counter, s)]);
  }
  order_starts_.assign(1, 0);
  group_starts_.assign(1, 0);
  int64_t group = 0;  // the raw bytes of the group being filled
  for (int64_t s : order_shards_) {
    const size_t i = static_cast<size_t>(s);
    if (group_bytes_ > 0 && group > 0 && group + shard_bytes_[i] > group_bytes_) {
      group_starts_.push_back(order_starts_.back());
      group = 0;
    }
    group += group_bytes_ > 0 ? shard_bytes_[i] : 0;
    order_starts_.push_back(order_starts_.back() + starts_[i + 1] - starts_[i]);
  }
  group_starts_.push_back(total_);
  epoch_ = epoch;
  group_index_ = block_index_ = -1;
}

// The permutation of block `block` of group `group` (its offsets 0 .. size - 1).
void MdsOrder::SetBlock(int64_t group, int64_t block) const {
  static const uint64_t key = Fnv1a("mds block order");
  const int64_t begin = group_starts_[static_cast<size_t>(group)] + block * block_;
  const int64_t size = std::min(block_, group_starts_[static_cast<size_t>(group) + 1] - begin);
  permutation_.resize(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) permutation_[static_cast<size_t>(i)] = i;
  // One group (no byte bound): the stream of the order before groups, "epoch:block".
  const uint64_t stream = Fnv1a(std::to_string(epoch_) + ":" + std::to_string(block) +
                                (group > 0 ? ":" + std::to_string(group) : ""));
  for (int64_t i = size; i > 1; --i)
    std::swap(permutation_[static_cast<size_t>(i - 1)],
              permutation_[PhiloxBelow(seed_, key ^ stream, static_cast<uint64_t>(i),
                                       static_cast<uint64_t>(i))]);
  group_index_ = group;
  block_index_ = block;
}

int64_t MdsOrder::Sample(int64_t position) const {
  const int64_t epoch = position / epoch_samples_, q = position % epoch_samples_;
  if (!shuffle_) return q;
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch != epoch_) SetEpoch(epoch);
  const int64_t group =
      std::upper_bound(group_starts_.begin(), group_starts_.end(), q) - group_starts_.begin() - 1;
  const int64_t in_group = q - group_starts_[static_cast<size_t>(group)];
  if (group != group_index_ || in_group / block_ != block_index_)
    SetBlock(group, in_group / block_);
  // Offset r of the shuffled sequence: in the shard whose range holds it.
  const int64_t r = group_starts_[static_cast<size_t>(group)] + block_index_ * block_ +
                    permutation_[static_cast<size_t>(in_group % block_)];
  const size_t k = static_cast<size_t>(
      std::upper_bound(order_starts_.begin(), order_starts_.end(), r) - order_starts_.begin() - 1);
  return starts_[static_cast<size_t>(order_shards_[k])] + (r - order_starts_[k]);
}

}  // namespace foundry
