#include "runtime/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/bfloat16.h"
#include "base/file_util.h"
#include "base/quote.h"
#include "compiler/import_context.h"

namespace foundry {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; tensors are written from memory as they are");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeCode {
  DType dtype;
  const char* name;
};
constexpr DTypeCode kDTypes[] = {
    {DType::kFloat32, "F32"}, {DType::kFloat16, "F16"}, {DType::kBFloat16, "BF16"},
    {DType::kFloat64, "F64"}, {DType::kInt64, "I64"},   {DType::kInt32, "I32"},
    {DType::kInt16, "I16"},   {DType::kInt8, "I8"},     {DType::kUint8, "U8"},
    {DType::kUint16, "U16"},  {DType::kUint32, "U32"},  {DType::kUint64, "U64"},
    {DType::kBool, "BOOL"},
};

DType DTypeFromSafetensorsName(std::string_view name) {
  for (const auto& c : kDTypes)
    if (name == c.name) return c.dtype;
  return DType::kUndefined;
}

// What a header entry says; the bytes are read once all entries passed.
struct Entry {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// A JSON value shown in a message: short, one line, ASCII.
std::string Shown(const nlohmann::json& v) {
  // A container of containers is described, not dumped: dump() recurses, and a value nested
  // 10,000 deep would overflow the stack.
  if (v.is_structured())
    for (const auto& e : v)
      if (e.is_structured())
        return std::string(v.is_array() ? "an array" : "an object") + " of " +
               std::to_string(v.size()) + (v.is_array() ? " values" : " keys") +
               " holding arrays or objects";
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// A whole number in [0, 2^63 - 1] (a JSON float, negative or string is not one).
bool ReadCount(const nlohmann::json& v, uint64_t& out) {
  if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

// One tensor's header entry; `what` is "tensor 'name'". Errors are the part after the file name.
Status ReadEntry(const std::string& what, const nlohmann::json& j, Entry& e) {
  if (!j.is_object()) return Error(what + " is " + Shown(j) + ", not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) return Error(what + " has no \"" + key + "\"");
  const nlohmann::json& dtype = j["dtype"];
  if (!dtype.is_string()) return Error(what + " has dtype " + Shown(dtype) + ", not a string");
  e.dtype = DTypeFromSafetensorsName(dtype.get<std::string>());
  if (e.dtype == DType::kUndefined)
    return Error(what + " has dtype " + Shown(dtype) +
                 ", which foundry does not read (F32, F16, BF16, F64, I64, I32, I16, I8, U8, U16, "
                 "U32, U64, BOOL)");
  const nlohmann::json& shape = j["shape"];
  if (!shape.is_array()) return Error(what + " has shape " + Shown(shape) + ", not an array");
  for (const nlohmann::json& d : shape) {
    uint64_t n = 0;
    if (!ReadCount(d, n))
      return Error(what + " has shape " + Shown(shape) + ": " + Shown(d) +
                   " is not a dimension (a whole number >= 0)");
    e.shape.push_back(static_cast<int64_t>(n));
  }
  const nlohmann::json& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !ReadCount(offsets[0], e.begin) ||
      !ReadCount(offsets[1], e.end))
    return Error(what + " has data_offsets " + Shown(offsets) +
                 ", not [begin, end] (whole numbers >= 0)");
  if (e.end < e.begin)
    return Error(what + " has data_offsets " + Shown(offsets) + ": end is before begin");
  StatusOr<int64_t> bytes = CheckTensorSize(e.dtype, e.shape);
  if (!bytes.ok()) return Error(what + ": " + bytes.status().message());
  if (static_cast<uint64_t>(*bytes) != e.end - e.begin)
    return Error(what + " is " + std::string(SafetensorsDTypeName(e.dtype)) +
                 ShapeToString(e.shape) + " (" + std::to_string(*bytes) +
                 " bytes) but its data_offsets " + Shown(offsets) + " span " +
                 std::to_string(e.end - e.begin) + " bytes");
  return Status::Ok();
}

// The header's entries, checked, in data order; `data_bytes` is what follows the header.
Status ReadHeader(std::string_view header, uint64_t data_bytes, std::vector<Entry>& entries,
                  std::map<std::string, std::string>& metadata) {
  if (header.empty() || header[0] != '{')
    return Error("the header does not begin with '{' (it is not JSON)");
  // nlohmann keeps the last of two equal keys: count the top level's keys as they are parsed.
  std::set<std::string> seen;
  std::string duplicate;
  nlohmann::json::parser_callback_t on_key = [&](int depth, nlohmann::json::parse_event_t event,
                                                 nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header, on_key);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 5: ..." -> from "parse".
    if (size_t at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
    return Error("the header is not valid JSON (" + Clip(EscapeName(what), 300) + ")");
  }
  if (!duplicate.empty()) return Error("the header names " + QuoteName(duplicate) + " twice");
  if (!j.is_object()) return Error("the header is " + Shown(j) + ", not a JSON object");
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return Error("__metadata__ is " + Shown(value) + ", not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          return Error("__metadata__ entry " + QuoteName(k) + " is " + Shown(v) + ", not a string");
        metadata[k] = v.get<std::string>();
      }
      continue;
    }
    Entry e;
    e.name = name;
    RETURN_IF_ERROR(ReadEntry("tensor " + QuoteName(name), value, e));
    entries.push_back(std::move(e));
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  uint64_t at = 0;
  for (const Entry& e : entries) {
    const std::string what = "the data_offsets [" + std::to_string(e.begin) + ", " +
                             std::to_string(e.end) + "] of tensor " + QuoteName(e.name);
    if (e.begin < at)
      return Error(what + " overlap bytes " + std::to_string(e.begin) + ".." +
                   std::to_string(std::min(at, e.end)) + " of another tensor");
    if (e.begin > at)
      return Error(what + " leave bytes " + std::to_string(at) + ".." + std::to_string(e.begin) +
                   " unused");
    if (e.end > data_bytes)
      return Error(what + " run past the end of the data (" + std::to_string(data_bytes) +
                   " bytes)");
    at = e.end;
  }
  if (at != data_bytes)
    return Error("the tensors cover " + std::to_string(at) + " of the " +
                 std::to_string(data_bytes) + " data bytes after the header");
  return Status::Ok();
}

std::string Bad(const std::string& path) {
  return QuoteName(path) + " is not a valid safetensors file: ";
}

// The length field, checked against the bytes there are.
Status CheckHeaderLength(uint64_t n, uint64_t file_bytes) {
  if (file_bytes < 8)
    return Error("it is " + std::to_string(file_bytes) +
                 " bytes, shorter than the 8-byte header length");
  if (n > kMaxHeaderBytes)
    return Error("the header length " + std::to_string(n) + " is over the limit of " +
                 std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > file_bytes - 8)
    return Error("the header length " + std::to_string(n) + " is more than the " +
                 std::to_string(file_bytes - 8) + " bytes after it");
  return Status::Ok();
}

uint64_t ReadU64(const char* p) {
  uint64_t n = 0;
  std::memcpy(&n, p, 8);
  return n;
}

}  // namespace

std::string_view SafetensorsDTypeName(DType dtype) {
  for (const auto& c : kDTypes)
    if (c.dtype == dtype) return c.name;
  return "";
}

Status WriteSafetensors(const std::string& path,
                        const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || header.contains(name))
      return Error("cannot write " + QuoteName(path) + ": the tensor name " + QuoteName(name) +
                   (name == "__metadata__" ? " is reserved" : " appears twice"));
    const std::string_view dtype = SafetensorsDTypeName(t->dtype());
    if (dtype.empty())
      return Error("cannot write " + QuoteName(path) + ": tensor " + QuoteName(name) +
                   " has no safetensors dtype");
    header[name] = {
        {"dtype", dtype}, {"shape", t->shape()}, {"data_offsets", {at, at + t->nbytes()}}};
    at += t->nbytes();
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception&) {
    return Error("cannot write " + QuoteName(path) +
                 ": a tensor name or metadata string is not valid UTF-8");
  }
  // Spaces up to a multiple of 8, so the data starts 8-aligned, as the Rust writer has it.
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint64_t n = json.size();
  return WriteFileAtomic(path, [&](std::FILE* f) {
    char len[8];
    std::memcpy(len, &n, 8);
    if (std::fwrite(len, 1, 8, f) != 8 || std::fwrite(json.data(), 1, n, f) != n) return false;
    for (const auto& [name, t] : tensors)
      if (t->nbytes() && std::fwrite(t->raw(), 1, t->nbytes(), f) != t->nbytes()) return false;
    return true;
  });
}

StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes, const std::string& path) {
  const uint64_t n = bytes.size() >= 8 ? ReadU64(bytes.data()) : 0;
  if (Status st = CheckHeaderLength(n, bytes.size()); !st.ok()) return st.Prepend(Bad(path));
  std::vector<Entry> entries;
  SafetensorsFile file;
  if (Status st = ReadHeader(bytes.substr(8, n), bytes.size() - 8 - n, entries, file.metadata);
      !st.ok())
    return st.Prepend(Bad(path));
  const char* data = bytes.data() + 8 + n;
  for (const Entry& e : entries) {
    StatusOr<Tensor> t = Tensor::Allocate(e.dtype, e.shape);
    if (!t.ok())
      return t.status().Prepend(QuoteName(path) + ": tensor " + QuoteName(e.name) + ": ");
    if (t->nbytes()) std::memcpy(t->raw(), data + e.begin, t->nbytes());
    file.tensors.emplace(e.name, std::move(t).value());
  }
  return file;
}

StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error("cannot open " + QuoteName(path) + ": " + std::strerror(errno));
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return Error("cannot read " + QuoteName(path) + ": it is not a file");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0);
  if (size < 0) return Error("cannot read " + QuoteName(path) + " (not a regular file?)");
  const uint64_t file_bytes = static_cast<uint64_t>(size);
  char len[8] = {};
  if (file_bytes >= 8 && !in.read(len, 8)) return Error("cannot read " + QuoteName(path));
  const uint64_t n = ReadU64(len);
  if (Status st = CheckHeaderLength(n, file_bytes); !st.ok()) return st.Prepend(Bad(path));
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n)))
    return Error("cannot read " + QuoteName(path));
  std::vector<Entry> entries;
  SafetensorsFile file;
  if (Status st = ReadHeader(header, file_bytes - 8 - n, entries, file.metadata); !st.ok())
    return st.Prepend(Bad(path));
  // In data order: one pass through the file.
  for (const Entry& e : entries) {
    StatusOr<Tensor> t = Tensor::Allocate(e.dtype, e.shape);
    if (!t.ok())
      return t.status().Prepend(QuoteName(path) + ": tensor " + QuoteName(e.name) + ": ");
    if (t->nbytes() &&
        !in.read(static_cast<char*>(t->raw()), static_cast<std::streamsize>(t->nbytes())))
      return Error("cannot read " + QuoteName(path) + ": it ended inside tensor " +
                   QuoteName(e.name));
    file.tensors.emplace(e.name, std::move(t).value());
  }
  return file;
}

// ---- PyTorch names ----

namespace {

// "transformer.blocks.0.attn.Wqkv.weight": '.'-separated runs of [A-Za-z0-9_].
bool IsStateDictKey(const std::string& name) {
  if (name.empty() || name.front() == '.' || name.back() == '.') return false;
  char prev = 0;
  for (char c : name) {
    const bool word =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!word && !(c == '.' && prev != '.')) return false;
    prev = c;
  }
  return true;
}

// torch.export's signature: "p_transformer_wte_weight: PARAMETER target='transformer.wte.weight'"
// per line; placeholder -> target for the parameters.
std::map<std::string, std::string> SignatureTargets(const Graph& g) {
  std::map<std::string, std::string> targets;
  auto it = g.metadata.find(import_internal::kGraphSignatureKey);
  if (it == g.metadata.end()) return targets;
  std::istringstream lines(it->second);
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(':');
    const size_t kind = line.find("PARAMETER target='");
    if (colon == std::string::npos || kind == std::string::npos || kind < colon) continue;
    const size_t begin = kind + 18, close = line.find('\'', begin);
    if (close == std::string::npos) continue;
    std::string placeholder = line.substr(0, colon);
    placeholder.erase(0, placeholder.find_first_not_of(" \t"));
    targets[placeholder] = line.substr(begin, close - begin);
  }
  return targets;
}

}  // namespace

TorchNames MapTorchNames(const Graph& graph, const std::vector<std::string>& parameters) {
  const std::map<std::string, std::string> targets = SignatureTargets(graph);
  TorchNames out;
  std::set<std::string> taken;
  for (const std::string& p : parameters) {
    std::string name;
    if (auto it = targets.find(p); it != targets.end() && IsStateDictKey(it->second))
      name = it->second;
    else if (IsStateDictKey(p))
      name = p;
    if (name.empty() || !taken.insert(name).second) {
      out.unmapped.push_back(p);
      name = p;
    }
    out.torch_name[p] = name;
  }
  return out;
}

namespace {

// IEEE binary16 -> binary32, exact (every half is a float): subnormals normalised, inf and NaN
// (payload kept) mapped to theirs.
float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    exp = 127 - 15 + 1;
    while (!(mant & 0x400)) {
      mant <<= 1;
      --exp;
    }
    return std::bit_cast<float>(sign | (exp << 23) | ((mant & 0x3FF) << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// "'a', 'b', 'c' and 4 more"
std::string FirstNames(const std::vector<std::string>& names) {
  constexpr size_t kShown = 3;
  std::string s;
  for (size_t i = 0; i < names.size() && i < kShown; ++i)
    s += (i ? ", " : "") + QuoteName(names[i]);
  if (names.size() > kShown) s += " and " + std::to_string(names.size() - kShown) + " more";
  return s;
}

std::string Count(size_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

Status LoadSafetensorsInto(const std::string& path, const Graph& graph,
                           const std::vector<std::string>& parameters,
                           std::map<std::string, Tensor>& params) {
  const std::string where = "--init-from " + path + ": ";
  StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  if (!file.ok()) return file.status().Prepend("--init-from: ");
  const TorchNames names = MapTorchNames(graph, parameters);
  std::vector<std::string> missing, mismatched;
  std::string first_mismatch;
  std::set<std::string> used;
  for (const std::string& p : parameters) {
    const std::string& name = names.torch_name.at(p);
    auto it = file->tensors.find(name);
    if (it == file->tensors.end()) {
      missing.push_back(name);
      continue;
    }
    used.insert(name);
    const Tensor& t = it->second;
    const Tensor& into = params.at(p);
    const DType d = t.dtype();
    if (t.shape() != into.shape() ||
        (d != DType::kFloat32 && d != DType::kBFloat16 && d != DType::kFloat16)) {
      if (mismatched.empty())
        first_mismatch = QuoteName(name) + " is " + std::string(SafetensorsDTypeName(d)) +
                         ShapeToString(t.shape()) + " in the file, the plan's parameter " +
                         (name == p ? "" : QuoteName(p) + " ") + "is F32" +
                         ShapeToString(into.shape());
      mismatched.push_back(name);
    }
  }
  std::vector<std::string> extra;
  for (const auto& [name, t] : file->tensors)
    if (!used.count(name)) extra.push_back(name);
  if (!missing.empty())
    return Error(where + Count(missing.size(), "parameter", "parameters") + " of the plan (of " +
                 std::to_string(parameters.size()) + ") " + (missing.size() == 1 ? "is" : "are") +
                 " not in the file: " + FirstNames(missing) +
                 "; the file must hold every parameter under its PyTorch name");
  if (!extra.empty())
    return Error(where + "the file has " + Count(extra.size(), "tensor", "tensors") +
                 " that no parameter of the plan is named: " + FirstNames(extra) +
                 "; foundry loads the trained parameters only (in PyTorch: save "
                 "dict(model.named_parameters()), not state_dict(), whose buffers the plan holds)");
  if (!mismatched.empty())
    return Error(
        where + Count(mismatched.size(), "tensor does", "tensors do") +
        " not fit the plan (F32, BF16 or F16 of the parameter's shape): " + first_mismatch +
        (mismatched.size() > 1 ? "; also " + FirstNames({mismatched.begin() + 1, mismatched.end()})
                               : std::string()));
  for (const std::string& p : parameters) {
    const Tensor& t = file->tensors.at(names.torch_name.at(p));
    Tensor& into = params.at(p);
    float* out = into.data<float>();
    const int64_t n = t.numel();
    if (t.dtype() == DType::kFloat32) {
      if (n) std::memcpy(out, t.raw(), t.nbytes());
    } else if (t.dtype() == DType::kBFloat16) {
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(t.data<uint16_t>()[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(t.data<uint16_t>()[i]);
    }
  }
  return Status::Ok();
}

}  // namespace foundry
