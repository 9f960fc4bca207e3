#include "runtime/data.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/hash.h"
#include "compiler/tensor_proto.h"
#include "kernels/cpu/philox.h"
#include "runtime/messages.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

namespace {

namespace fs = std::filesystem;

}  // namespace

std::string_view TokenDTypeName(TokenDType t) {
  return t == TokenDType::kUint16 ? "uint16" : "int32";
}

StatusOr<TokenDType> ParseTokenDType(std::string_view name) {
  if (name == "uint16") return TokenDType::kUint16;
  if (name == "int32") return TokenDType::kInt32;
  return Error("--data-dtype " + std::string(name) + ": choose uint16 or int32");
}

StatusOr<TokenFile> TokenFile::Open(const std::string& path, TokenDType dtype) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  if (ec) return Error("--data " + path + ": cannot open it: " + ec.message());
  const int64_t width = dtype == TokenDType::kUint16 ? 2 : 4;
  if (size % width != 0)
    return Error("--data " + path + ": " + std::to_string(size) +
                 " bytes is not a whole number "
                 "of " +
                 std::string(TokenDTypeName(dtype)) + " tokens; is --data-dtype right?");
  TokenFile f;
  f.path_ = path;
  f.dtype_ = dtype;
  f.num_tokens_ = static_cast<int64_t>(size) / width;
  return f;
}

Status TokenFile::ReadWindow(int64_t k, int64_t window, int64_t vocab, int64_t* out) const {
  const int64_t windows = num_tokens_ / window;
  if (windows == 0)
    return Error("--data " + path_ + ": " + std::to_string(num_tokens_) +
                 " tokens is shorter than one window of seq + 1 = " + std::to_string(window) +
                 " tokens");
  const int64_t start = (k % windows) * window;
  const int64_t width = dtype_ == TokenDType::kUint16 ? 2 : 4;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return Error("--data " + path_ + ": cannot open it: " + std::strerror(errno));
  std::vector<unsigned char> bytes(static_cast<size_t>(window * width));
  in.seekg(start * width);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in)
    return Error("--data " + path_ + ": read failed at token " + std::to_string(start) +
                 " (was the file truncated?)");
  for (int64_t t = 0; t < window; ++t) {
    const unsigned char* b = &bytes[static_cast<size_t>(t * width)];
    int64_t id =
        dtype_ == TokenDType::kUint16
            ? static_cast<int64_t>(b[0] | (b[1] << 8))
            : static_cast<int64_t>(static_cast<int32_t>(
                  static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
                  (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24)));
    if (vocab > 0 && (id < 0 || id >= vocab))
      return Error(TokenOutsideVocabulary("--data " + path_, id, start + t, "", vocab));
    out[t] = id;
  }
  return Status::Ok();
}

std::string TokenOutsideVocabulary(const std::string& where, int64_t id, int64_t position,
                                   const std::string& index, int64_t vocab) {
  return where + ": token " + std::to_string(id) + " at position " + std::to_string(position) +
         index + " is outside the vocabulary [0, " + std::to_string(vocab) + ")";
}

void SyntheticWindow(uint64_t seed, int64_t k, int64_t window, int64_t vocab, int64_t* out) {
  static const uint64_t key = Fnv1a("synthetic");
  for (int64_t t = 0; t < window; ++t) {
    uint32_t bits = PhiloxRandom(seed, key, static_cast<uint64_t>(k * window + t));
    out[t] =
        static_cast<int64_t>((static_cast<uint64_t>(bits) * static_cast<uint64_t>(vocab)) >> 32);
  }
}

namespace {

void Put(Tensor& t, int64_t i, int64_t value) {
  if (t.dtype() == DType::kInt32)
    t.data<int32_t>()[i] = static_cast<int32_t>(value);
  else
    t.data<int64_t>()[i] = value;
}

}  // namespace

void WriteTokenBatch(const std::vector<int64_t>& windows, int64_t batch, int64_t seq,
                     bool loss_in_model, Tensor& ids, Tensor* labels) {
  const int64_t shift = loss_in_model ? 0 : 1;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) {
      Put(ids, b * seq + t, windows[static_cast<size_t>(b * (seq + 1) + t)]);
      if (labels)
        Put(*labels, b * seq + t, windows[static_cast<size_t>(b * (seq + 1) + t + shift)]);
    }
}

TokenBatch MakeTokenBatch(const std::vector<int64_t>& windows, int64_t batch, int64_t seq,
                          bool loss_in_model, DType ids_dtype, DType labels_dtype) {
  TokenBatch tb{Tensor(ids_dtype, {batch, seq}), Tensor(labels_dtype, {batch, seq})};
  WriteTokenBatch(windows, batch, seq, loss_in_model, tb.input_ids, &tb.labels);
  return tb;
}

// ---- the data source of a plan -------------------------------------------------------------

namespace {

// The plan input that an embedding Gather (float initializer data, axis 0) takes as indices,
// and that embedding's row count.
void FindTokenInput(const Graph& g, const std::vector<std::string>& inputs, std::string* input,
                    int64_t* vocab) {
  for (const Node& n : g.nodes) {
    if (!n.domain.empty() || n.op_type != "Gather" || n.inputs.size() < 2) continue;
    if (n.GetInt("axis", 0) != 0) continue;
    if (std::find(inputs.begin(), inputs.end(), n.inputs[1]) == inputs.end()) continue;
    const Value* table = g.FindValue(n.inputs[0]);
    if (!table || !g.IsInitializer(n.inputs[0]) || !IsFloat(table->dtype) ||
        table->shape.size() != 2)
      continue;
    *input = n.inputs[1];
    *vocab = table->shape[0];
    return;
  }
}

bool Has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Every input has data: fed, or filled by token batches.
Status CheckEveryInputHasData(const DataSource& s, const std::vector<std::string>& inputs) {
  std::vector<std::string> unfed;
  for (const auto& in : inputs)
    if (!s.fed.count(in)) unfed.push_back(in);
  if (!unfed.empty() && s.tokens_input.empty())
    return Error(
        "cannot tell which input takes token ids (no Gather on an embedding consumes one); give "
        "the inputs with --feed NAME=FILE.pb (inputs: " +
        JoinNames(inputs) + ")");
  for (const auto& in : unfed) {
    if (in == s.tokens_input || (in == s.labels_input && s.token_batches())) continue;
    if (in == s.labels_input)
      return Error("input '" + in + "' has no data: pass it with --feed " + in +
                   "=FILE.pb (with --feed " + s.tokens_input +
                   " given, labels cannot come from token windows)");
    return Error("input '" + in + "' has no data: pass it with --feed " + in + "=FILE.pb");
  }
  return Status::Ok();
}

// Token batches can fill the token input and the labels; the file, when given, holds a window.
Status ChooseTokenBatches(const Graph& g, const std::string& data_path, TokenDType data_dtype,
                          DataSource& s) {
  if (data_path.empty() && s.vocab <= 0)
    return Error("synthetic tokens need the vocabulary size, and no embedding Gather consumes '" +
                 s.tokens_input + "'; pass --data FILE or --feed " + s.tokens_input + "=FILE.pb");
  const Value* ids = g.FindValue(s.tokens_input);
  if (ids->shape.size() != 2 || !ids->ShapeKnown() ||
      (ids->dtype != DType::kInt64 && ids->dtype != DType::kInt32))
    return Error("input '" + s.tokens_input + "' is " + ids->TypeString() +
                 "; token batches need an i64 or i32 [batch, seq] input; give it with --feed");
  s.batch = ids->shape[0];
  s.seq = ids->shape[1];
  if (s.labels_from_windows()) {
    const Value* lv = g.FindValue(s.labels_input);
    if (lv->shape != ids->shape || (lv->dtype != DType::kInt64 && lv->dtype != DType::kInt32))
      return Error("input '" + s.labels_input + "' is " + lv->TypeString() + " but '" +
                   s.tokens_input + "' is " + ids->TypeString() +
                   "; token batches need labels shaped like the token ids; give them with "
                   "--feed");
  }
  if (data_path.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(TokenFile f, TokenFile::Open(data_path, data_dtype));
  if (f.num_tokens() < s.seq + 1)
    return Error("--data " + data_path + ": " + std::to_string(f.num_tokens()) +
                 " tokens is shorter than one window of seq + 1 = " + std::to_string(s.seq + 1) +
                 " tokens");
  s.file = std::move(f);
  return Status::Ok();
}

}  // namespace

StatusOr<DataSource> ChooseDataSource(const Graph& g, const std::vector<std::string>& inputs,
                                      const std::set<std::string>& fed,
                                      const std::string& data_path, TokenDType data_dtype) {
  DataSource s;
  s.fed = fed;
  FindTokenInput(g, inputs, &s.tokens_input, &s.vocab);
  if (s.tokens_input.empty() && Has(inputs, "input_ids")) s.tokens_input = "input_ids";
  if (Has(inputs, "labels")) s.labels_input = "labels";
  RETURN_IF_ERROR(CheckEveryInputHasData(s, inputs));
  if (!data_path.empty() && !s.token_batches())
    return Error("--data " + data_path + ": --feed " + s.tokens_input +
                 " already gives the tokens; drop one or the other");
  if (s.token_batches()) {
    RETURN_IF_ERROR(ChooseTokenBatches(g, data_path, data_dtype, s));
    return s;
  }
  // Fully fed: batch x seq for tokens/s from the token input when it is [batch, seq].
  const Value* ids = s.tokens_input.empty() ? nullptr : g.FindValue(s.tokens_input);
  if (ids && ids->shape.size() == 2) {
    s.batch = ids->shape[0];
    s.seq = ids->shape[1];
  }
  return s;
}

std::string DataSource::Describe(uint64_t seed) const {
  if (!token_batches()) return "--feed";
  std::string d = file ? "--data " + file->path() + " (" +
                             std::string(TokenDTypeName(file->dtype())) + ", " +
                             std::to_string(file->num_tokens()) + " tokens)"
                       : "synthetic tokens (seed " + std::to_string(seed) + ")";
  if (!fed.empty()) d += " + --feed";
  return d;
}

Status ReadStepWindows(const DataSource& source, uint64_t seed, int64_t position,
                       std::vector<int64_t>& windows) {
  const int64_t window = source.seq + 1;
  windows.resize(static_cast<size_t>(source.batch * window));
  for (int64_t b = 0; b < source.batch; ++b) {
    const int64_t k = position + b;
    int64_t* out = &windows[static_cast<size_t>(b * window)];
    if (source.file)
      RETURN_IF_ERROR(source.file->ReadWindow(k, window, source.vocab, out));
    else
      SyntheticWindow(seed, k, window, source.vocab, out);
  }
  return Status::Ok();
}

// ---- feeds ---------------------------------------------------------------------------------

StatusOr<Feed> ReadFeed(const std::string& spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    return Error("--feed " + spec + ": expected NAME=FILE.pb");
  Feed f;
  f.spec = spec;
  f.name = spec.substr(0, eq);
  auto t = ReadTensorFile(spec.substr(eq + 1));
  if (!t.ok()) return t.status().Prepend("--feed " + spec + ": ");
  f.tensor = std::move(t).value();
  return f;
}

Status CheckFeed(const Feed& feed, const Graph& graph, const std::vector<std::string>& inputs) {
  if (std::find(inputs.begin(), inputs.end(), feed.name) == inputs.end())
    return Error("--feed " + feed.spec + ": no input named '" + feed.name + "'; the inputs are " +
                 JoinNames(inputs));
  const Value* v = graph.FindValue(feed.name);
  if (!v) return Error("--feed " + feed.spec + ": input '" + feed.name + "' has no type");
  if (v->dtype != feed.tensor.dtype() || v->shape != feed.tensor.shape())
    return Error("--feed " + feed.spec + ": expected " + TypeOf(v->dtype, v->shape) + ", got " +
                 TypeOf(feed.tensor.dtype(), feed.tensor.shape()));
  return Status::Ok();
}

Status CheckFedTokens(const std::string& spec, const Tensor& t, int64_t vocab) {
  if (vocab <= 0) return Status::Ok();
  if (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32) return Status::Ok();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t id = t.dtype() == DType::kInt64 ? t.data<int64_t>()[i]
                                                  : static_cast<int64_t>(t.data<int32_t>()[i]);
    if (id >= 0 && id < vocab) continue;
    // The element's index in the tensor's shape: "[0,5]".
    std::string index;
    int64_t rest = i;
    const auto& shape = t.shape();
    std::vector<int64_t> at(shape.size(), 0);
    for (size_t d = shape.size(); d-- > 0;) {
      if (shape[d] > 0) {
        at[d] = rest % shape[d];
        rest /= shape[d];
      }
    }
    for (size_t d = 0; d < at.size(); ++d) index += (d ? "," : "") + std::to_string(at[d]);
    return Error(
        TokenOutsideVocabulary("--feed " + spec, id, i, " (element [" + index + "])", vocab));
  }
  return Status::Ok();
}

}  // namespace foundry
