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
  switch (t) {
    case TokenDType::kUint16:
      return "uint16";
    case TokenDType::kInt32:
      return "int32";
    case TokenDType::kAuto:
      return "auto";
    case TokenDType::kUint32:
      return "uint32";
  }
  return "?";
}

StatusOr<TokenDType> ParseTokenDType(std::string_view name) {
  if (name == "auto") return TokenDType::kAuto;
  if (name == "uint16") return TokenDType::kUint16;
  if (name == "int32") return TokenDType::kInt32;
  return Error("--data-dtype " + std::string(name) + ": choose auto, uint16 or int32");
}

namespace {

int64_t WidthOf(TokenDType t) { return t == TokenDType::kUint16 ? 2 : 4; }

uint32_t LoadU32(const unsigned char* b) {
  return static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
         (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24);
}

uint32_t LoadU16(const unsigned char* b) {
  return static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8);
}

// One little-endian token id of type `t` (kUint16, kInt32 or kUint32).
int64_t Decode(const unsigned char* b, TokenDType t) {
  if (t == TokenDType::kUint16) return static_cast<int64_t>(LoadU16(b));
  if (t == TokenDType::kUint32) return static_cast<int64_t>(LoadU32(b));
  return static_cast<int64_t>(static_cast<int32_t>(LoadU32(b)));
}

// `n` bytes of `path` from byte `offset`.
Status ReadBytes(const std::string& path, int64_t offset, int64_t n,
                 std::vector<unsigned char>& bytes, const std::string& failed) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error("--data " + path + ": cannot open it: " + std::strerror(errno));
  bytes.resize(static_cast<size_t>(n));
  in.seekg(offset);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(n));
  if (!in) return Error("--data " + path + ": " + failed);
  return Status::Ok();
}

// The int32 guard of data.h (kInt32SniffBytes, kInt32SniffMinPairs) on the first bytes `head`
// of a header-less file of `size` bytes about to be read as uint16 by default.
Status CheckNotInt32(const std::vector<unsigned char>& head, int64_t size,
                     const std::string& where) {
  if (size % 4 != 0) return Status::Ok();
  const int64_t pairs = static_cast<int64_t>(head.size()) / 4;
  if (pairs < kInt32SniffMinPairs) return Status::Ok();
  bool low_above_3 = false;
  for (int64_t i = 0; i < pairs; ++i) {
    if (LoadU16(&head[static_cast<size_t>(4 * i + 2)]) > 3) return Status::Ok();
    if (LoadU16(&head[static_cast<size_t>(4 * i)]) > 3) low_above_3 = true;
  }
  if (!low_above_3) return Status::Ok();
  return Error(where + "looks like int32 tokens, not uint16: in its first " +
               std::to_string(pairs * 4) +
               " bytes every second uint16 is 0..3, the high half of an int32 id below 262144; "
               "pass --data-dtype int32 (or --data-dtype uint16 if it is uint16)");
}

}  // namespace

StatusOr<TokenFile> TokenFile::Open(const std::string& path, TokenDType dtype) {
  std::error_code ec;
  auto file_size = fs::file_size(path, ec);
  if (ec) return Error("--data " + path + ": cannot open it: " + ec.message());
  const int64_t size = static_cast<int64_t>(file_size);
  const std::string where = "--data " + path + ": ";
  // The first bytes: an llm.c header, or the int32 guard's sample.
  std::vector<unsigned char> head;
  RETURN_IF_ERROR(ReadBytes(path, 0, std::min<int64_t>(size, kInt32SniffBytes), head,
                            "cannot read its first bytes"));
  TokenFile f;
  f.path_ = path;
  const int32_t magic = size >= 4 ? static_cast<int32_t>(LoadU32(head.data())) : 0;
  if (magic == kLlmcMagicEval)
    return Error(where +
                 "is llm.c's eval file (magic 20240522: multiple-choice examples), not a token "
                 "file; pass a token .bin (magic 20240520)");
  if (magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3) {
    const std::string m = std::to_string(magic);
    if (size < kLlmcHeaderBytes)
      return Error(where + "starts with llm.c's magic " + m + " but is " + std::to_string(size) +
                   " bytes, shorter than its 1024-byte header (was the file truncated?)");
    const int32_t version = static_cast<int32_t>(LoadU32(&head[4]));
    const int32_t count = static_cast<int32_t>(LoadU32(&head[8]));
    const std::string mv = "magic " + m + ", version " + std::to_string(version);
    if (magic == kLlmcMagicGpt2 && version == 1)
      f.dtype_ = TokenDType::kUint16;
    else if (magic == kLlmcMagicLlama3 && version == 7)
      f.dtype_ = TokenDType::kUint32;
    else
      return Error(where + "has an llm.c header with " + mv +
                   ", which foundry does not read (it reads magic 20240520 version 1: uint16 "
                   "tokens, and magic 20240801 version 7: uint32 tokens)");
    const std::string dt(TokenDTypeName(f.dtype_));
    const int64_t want = kLlmcHeaderBytes + static_cast<int64_t>(count) * f.width();
    if (count < 0 || want != size)
      return Error(where + "its llm.c header (" + mv + ") counts " + std::to_string(count) + " " +
                   dt + " tokens, 1024 + " + std::to_string(count) + " * " +
                   std::to_string(f.width()) + " = " + std::to_string(want) +
                   " bytes, but the file is " + std::to_string(size) +
                   " bytes (truncated, or not written by llm.c's write_datafile?)");
    if (dtype != TokenDType::kAuto && WidthOf(dtype) != f.width())
      return Error(where + "has an llm.c header (" + mv + ": " + dt + " tokens) but --data-dtype " +
                   std::string(TokenDTypeName(dtype)) +
                   " was given; drop --data-dtype (auto reads the header)");
    f.num_tokens_ = count;
    f.llmc_version_ = version;
    f.header_bytes_ = kLlmcHeaderBytes;
    return f;
  }
  f.dtype_ = dtype == TokenDType::kAuto ? TokenDType::kUint16 : dtype;
  if (size % f.width() != 0)
    return Error(where + std::to_string(size) + " bytes is not a whole number of " +
                 std::string(TokenDTypeName(f.dtype_)) + " tokens; is --data-dtype right?");
  if (dtype == TokenDType::kAuto) RETURN_IF_ERROR(CheckNotInt32(head, size, where));
  f.num_tokens_ = size / f.width();
  return f;
}

std::string TokenFile::DescribeFormat() const {
  std::string d = llmc_version_ ? "llm.c v" + std::to_string(llmc_version_) + " header, "
                                : std::string("no header, ");
  return d + std::string(TokenDTypeName(dtype_)) + ", " + std::to_string(num_tokens_) + " tokens";
}

Status TokenFile::Read(int64_t start, int64_t count, int64_t vocab, int64_t* out) const {
  std::vector<unsigned char> bytes;
  RETURN_IF_ERROR(
      ReadBytes(path_, header_bytes_ + start * width(), count * width(), bytes,
                "read failed at token " + std::to_string(start) + " (was the file truncated?)"));
  for (int64_t t = 0; t < count; ++t) {
    const int64_t id = Decode(&bytes[static_cast<size_t>(t * width())], dtype_);
    if (vocab > 0 && (id < 0 || id >= vocab))
      return Error(TokenOutsideVocabulary("--data " + path_, id, start + t, "", vocab));
    out[t] = id;
  }
  return Status::Ok();
}

Status TokenFile::ReadWindow(int64_t k, int64_t window, int64_t vocab, int64_t* out) const {
  const int64_t windows = num_tokens_ / window;
  if (windows == 0)
    return Error("--data " + path_ + ": " + std::to_string(num_tokens_) +
                 " tokens is shorter than one window of seq + 1 = " + std::to_string(window) +
                 " tokens");
  return Read((k % windows) * window, window, vocab, out);
}

Status TokenFile::CheckFirstTokens(int64_t count, int64_t vocab) const {
  if (vocab <= 0 || count <= 0) return Status::Ok();
  std::vector<int64_t> ids(static_cast<size_t>(count));
  Status st = Read(0, count, vocab, ids.data());
  // Only int32 can be the wrong guess here: an int32 id in [0, vocab) read as uint16 gives two
  // halves in [0, vocab) too, so the int32 guard of Open is what catches that one.
  if (st.ok() || llmc_version_ != 0 || dtype_ != TokenDType::kInt32) return st;
  const TokenDType other = TokenDType::kUint16;
  const int64_t n = count * width() / WidthOf(other);
  std::vector<unsigned char> bytes;
  if (n == 0 || !ReadBytes(path_, 0, n * WidthOf(other), bytes, "").ok()) return st;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t id = Decode(&bytes[static_cast<size_t>(t * WidthOf(other))], other);
    if (id < 0 || id >= vocab) return st;
  }
  const std::string o(TokenDTypeName(other));
  return Error(st.message() + "; read as " + o + " (--data-dtype " + o + ") its first " +
               std::to_string(n) + " tokens are all in the vocabulary");
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

void WriteTokenBatch(const std::vector<int64_t>& windows, int64_t batch, int64_t seq, bool shift,
                     Tensor& ids, Tensor* labels) {
  const int64_t by = shift ? 1 : 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) {
      Put(ids, b * seq + t, windows[static_cast<size_t>(b * (seq + 1) + t)]);
      if (labels) Put(*labels, b * seq + t, windows[static_cast<size_t>(b * (seq + 1) + t + by)]);
    }
}

TokenBatch MakeTokenBatch(const std::vector<int64_t>& windows, int64_t batch, int64_t seq,
                          bool shift, DType ids_dtype, DType labels_dtype) {
  TokenBatch tb{Tensor(ids_dtype, {batch, seq}), Tensor(labels_dtype, {batch, seq})};
  WriteTokenBatch(windows, batch, seq, shift, tb.input_ids, &tb.labels);
  return tb;
}

// ---- the data source of a plan -------------------------------------------------------------

namespace {

// Whether `value` is a parameter gathered whole from its shards (foundry::AllGather, a plan
// compiled with --world-size).
bool GatheredParameter(const Graph& g, const std::string& value) {
  for (const Node& n : g.nodes)
    if (n.domain == "foundry" && n.op_type == "AllGather" &&
        std::find(n.outputs.begin(), n.outputs.end(), value) != n.outputs.end())
      return true;
  return false;
}

// A weight as a Gather reads it: an initializer, a gathered shard, or a Cast of either (FSDP's
// bf16 parameters, docs/design.md §9).
bool IsWeight(const Graph& g, const std::string& value) {
  if (g.IsInitializer(value) || GatheredParameter(g, value)) return true;
  for (const Node& n : g.nodes)
    if (n.domain.empty() && n.op_type == "Cast" && !n.outputs.empty() && n.outputs[0] == value)
      return !n.inputs.empty() && n.inputs[0] != value && IsWeight(g, n.inputs[0]);
  return false;
}

// The plan input that an embedding Gather (float weight data, axis 0) takes as indices, and that
// embedding's row count.
void FindTokenInput(const Graph& g, const std::vector<std::string>& inputs, std::string* input,
                    int64_t* vocab) {
  for (const Node& n : g.nodes) {
    if (!n.domain.empty() || n.op_type != "Gather" || n.inputs.size() < 2) continue;
    if (n.GetInt("axis", 0) != 0) continue;
    if (std::find(inputs.begin(), inputs.end(), n.inputs[1]) == inputs.end()) continue;
    const Value* table = g.FindValue(n.inputs[0]);
    if (!table || !IsWeight(g, n.inputs[0]) || !IsFloat(table->dtype) || table->shape.size() != 2)
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

// Window k of an MDS source (DataSource::mds): its sample cut to seq tokens, then the pad label.
Status ReadMdsWindow(const DataSource& s, int64_t k, int64_t* out) {
  thread_local std::vector<int64_t> ids;
  const int64_t sample = s.mds_order->Sample(k);
  RETURN_IF_ERROR(s.mds->Tokens(sample, ids));
  const std::string where = "--data " + s.mds->dir() + ": sample " + std::to_string(sample);
  if (static_cast<int64_t>(ids.size()) < s.seq)
    return Error(where + " has " + std::to_string(ids.size()) +
                 " tokens, fewer than the plan's sequence of " + std::to_string(s.seq) +
                 " (llm-foundry pads a short sample with the tokenizer's pad token, and fails "
                 "when it has none, as GPT-NeoX's; foundry does not pad): write samples of " +
                 std::to_string(s.seq) + " tokens or more (convert_dataset_hf.py --concat_tokens " +
                 std::to_string(s.seq) + ")");
  for (int64_t t = 0; t < s.seq; ++t) {
    const int64_t id = ids[static_cast<size_t>(t)];
    if (s.vocab > 0 && (id < 0 || id >= s.vocab))
      return Error(TokenOutsideVocabulary(where, id, t, "", s.vocab));
    out[t] = id;
  }
  out[s.seq] = s.mds_label_pad;
  return Status::Ok();
}

// An MDS folder as the token windows: opened (MdsDataset::Open's checks), read in index order
// until SetMdsEpoch, and its first samples (up to 1 MiB of ids) read before any step.
Status ChooseMdsBatches(const Graph& g, const std::string& path, const MdsReadOptions& o,
                        DataSource& s) {
  ASSIGN_OR_RETURN(std::shared_ptr<const MdsDataset> d,
                   MdsDataset::Open(path, "--data " + path, o.token_encoding_type));
  if (d->fixed_tokens() >= 0 && d->fixed_tokens() < s.seq)
    return Error("--data " + path + ": every sample holds " + std::to_string(d->fixed_tokens()) +
                 " tokens (column " + d->token_column() + "), fewer than the plan's sequence of " +
                 std::to_string(s.seq) + "; compile the plan with seq " +
                 std::to_string(d->fixed_tokens()) + " or write longer samples");
  std::optional<int64_t> ignore;
  for (const Node& n : g.nodes)
    if (n.domain.empty() && n.HasAttr("ignore_index") &&
        (n.op_type == "SoftmaxCrossEntropyLoss" || n.op_type == "NegativeLogLikelihoodLoss"))
      ignore = n.GetInt("ignore_index", -100);
  if (s.labels_from_windows() && s.shift_labels) {
    if (!ignore)
      return Error("--data " + path +
                   ": with shifted labels the last position of a sample has no label "
                   "(llm-foundry's labels end with the sample), and the model's loss has no "
                   "ignore_index to give it; use a token file, or --labels same");
    s.mds_label_pad = *ignore;
  }
  s.mds = std::move(d);
  s.mds_options = o;
  RETURN_IF_ERROR(SetMdsEpoch(s, s.batch));
  const int64_t first = std::min(s.mds_order->epoch_samples(),
                                 std::max<int64_t>(1, (int64_t{1} << 20) / (s.seq + 1)));
  std::vector<int64_t> window(static_cast<size_t>(s.seq + 1));
  for (int64_t k = 0; k < first; ++k) RETURN_IF_ERROR(ReadMdsWindow(s, k, window.data()));
  return Status::Ok();
}

// Token batches can fill the token input and the labels; the file, when given, holds a window.
Status ChooseTokenBatches(const Graph& g, const std::string& data_path, TokenDType data_dtype,
                          const MdsReadOptions& mds, DataSource& s) {
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
  if (IsMdsFolder(data_path) && data_dtype != TokenDType::kAuto)
    return Error("--data " + data_path +
                 ": --data-dtype is for token files; an MDS folder's "
                 "index.json says how its ids are stored");
  if (IsMdsFolder(data_path)) return ChooseMdsBatches(g, data_path, mds, s);
  if (mds.shuffle || mds.drop_last)
    return Error("--data " + data_path + ": " + (mds.shuffle ? "--shuffle" : "--drop-last") +
                 " is for an MDS folder; a token file is read in order, window after window");
  ASSIGN_OR_RETURN(TokenFile f, TokenFile::Open(data_path, data_dtype));
  if (f.num_tokens() < s.seq + 1)
    return Error("--data " + data_path + ": " + std::to_string(f.num_tokens()) +
                 " tokens is shorter than one window of seq + 1 = " + std::to_string(s.seq + 1) +
                 " tokens");
  // Before any step: the first whole windows (up to 1 MiB of tokens) against the vocabulary, so
  // that a wrong width is refused at once, with the width that would fit.
  const int64_t whole = f.num_tokens() / (s.seq + 1) * (s.seq + 1);
  RETURN_IF_ERROR(f.CheckFirstTokens(std::min(whole, kInt32SniffBytes / f.width()), s.vocab));
  s.file = std::move(f);
  return Status::Ok();
}

}  // namespace

StatusOr<DataSource> ChooseDataSource(const Graph& g, const std::vector<std::string>& inputs,
                                      const std::set<std::string>& fed,
                                      const std::string& data_path, TokenDType data_dtype,
                                      bool loss_in_model, LabelRule labels,
                                      const MdsReadOptions& mds) {
  DataSource s;
  s.fed = fed;
  s.label_rule = labels;
  s.loss_in_model = loss_in_model;
  s.shift_labels = labels == LabelRule::kShifted || (labels == LabelRule::kAuto && !loss_in_model);
  FindTokenInput(g, inputs, &s.tokens_input, &s.vocab);
  if (s.tokens_input.empty() && Has(inputs, "input_ids")) s.tokens_input = "input_ids";
  if (Has(inputs, "labels")) s.labels_input = "labels";
  for (const Node& n : g.nodes)
    if (n.domain.empty() && n.op_type == "Slice" && !n.inputs.empty() && !s.labels_input.empty() &&
        n.inputs[0] == s.labels_input)
      s.model_slices_labels = true;
  RETURN_IF_ERROR(CheckEveryInputHasData(s, inputs));
  if (!data_path.empty() && !s.token_batches())
    return Error("--data " + data_path + ": --feed " + s.tokens_input +
                 " already gives the tokens; drop one or the other");
  if (s.token_batches()) {
    RETURN_IF_ERROR(ChooseTokenBatches(g, data_path, data_dtype, mds, s));
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

bool IsMdsFolder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

Status SetMdsEpoch(DataSource& s, int64_t global_batch) {
  if (!s.mds) return Status::Ok();
  const int64_t n = s.mds->num_samples();
  const int64_t epoch = s.mds_options.drop_last ? n - n % global_batch : n;
  if (epoch == 0)
    return Error("--data " + s.mds->dir() + ": its " + std::to_string(n) +
                 " samples hold no whole global batch of " + std::to_string(global_batch) +
                 " (drop_last)");
  // A shuffled block's shards: at most half of what the reader holds decompressed, so the next
  // group's first shards load beside the last ones of this.
  s.mds_order = std::make_shared<const MdsOrder>(
      s.mds->shard_starts(), epoch, s.mds_options.shuffle, s.mds_options.shuffle_seed,
      s.mds_options.shuffle_block, s.mds->shard_raw_bytes(), MdsDataset::kMdsCacheBytes / 2);
  return Status::Ok();
}

std::string DataSource::Describe(uint64_t seed) const {
  if (!token_batches()) return "--feed";
  std::string d = file ? "--data " + file->path() + " (" + file->DescribeFormat() + ")"
                       : "synthetic tokens (seed " + std::to_string(seed) + ")";
  if (mds)
    d = "--data " + mds->dir() + " (" + mds->DescribeFormat() + "; " +
        (mds_options.shuffle
             ? "shuffled by foundry's own order, seed " + std::to_string(mds_options.shuffle_seed) +
                   ", blocks of " + std::to_string(mds_options.shuffle_block)
             : std::string("in index order")) +
        (mds_options.drop_last ? "; drop_last" : "") + ")";
  if (!fed.empty()) d += " + --feed";
  return d;
}

std::string_view LabelRuleName(LabelRule r) {
  return r == LabelRule::kShifted ? "shifted" : r == LabelRule::kSame ? "same" : "auto";
}

StatusOr<LabelRule> ParseLabelRule(std::string_view name) {
  if (name == "auto") return LabelRule::kAuto;
  if (name == "shifted") return LabelRule::kShifted;
  if (name == "same") return LabelRule::kSame;
  return Error("--labels " + std::string(name) + ": choose auto, shifted or same");
}

std::string DataSource::DescribeLabels() const {
  if (!labels_from_windows()) return "";
  const std::string d = shift_labels ? "labels = window[1:seq+1] (input_ids shifted by one): "
                                     : "labels = input_ids (window[0:seq]): ";
  if (label_rule != LabelRule::kAuto)
    return d + "--labels " + std::string(LabelRuleName(label_rule)) +
           (loss_in_model ? " (the model has its own loss)" : " (foundry appended the loss)");
  if (!loss_in_model) return d + "foundry appended the loss, which does not shift them";
  if (model_slices_labels)
    return d + "the model's own loss shifts them (it slices 'labels', as HF and llm-foundry do)";
  return d + "the model has its own loss, and nothing in it slices 'labels'";
}

std::string DataSource::LabelsWarning() const {
  if (label_rule == LabelRule::kAuto && labels_from_windows() && loss_in_model &&
      !model_slices_labels)
    return "the model has its own loss but nothing in it slices 'labels' (HF and llm-foundry "
           "models shift them with a Slice): if its loss takes already-shifted targets (nanoGPT "
           "style), pass --labels shifted, or it learns to copy its input; --labels same keeps "
           "labels = input_ids without this warning";
  if (label_rule == LabelRule::kAuto) return "";
  const std::string option = "--labels " + std::string(LabelRuleName(label_rule));
  if (!labels_from_windows())
    return option + " does nothing: the labels do not come from token windows (" +
           (labels_input.empty() ? "the plan has no labels input" : "--feed gives them") + ")";
  if (label_rule == LabelRule::kShifted && loss_in_model && model_slices_labels)
    return option +
           " overrides the plan's rule: the model's own loss slices 'labels' (shifts them itself, "
           "as HF and llm-foundry do), so shifted labels train it to predict the token two ahead";
  if (label_rule == LabelRule::kSame && !loss_in_model)
    return option +
           " overrides the plan's rule: foundry appended this model's loss, which does not shift "
           "the labels, so labels = input_ids train it to copy its input";
  return "";
}

Status ReadStepWindows(const DataSource& source, uint64_t seed, int64_t position,
                       std::vector<int64_t>& windows) {
  const int64_t window = source.seq + 1;
  windows.resize(static_cast<size_t>(source.batch * window));
  for (int64_t b = 0; b < source.batch; ++b) {
    const int64_t k = position + b;
    int64_t* out = &windows[static_cast<size_t>(b * window)];
    if (source.mds)
      RETURN_IF_ERROR(ReadMdsWindow(source, k, out));
    else if (source.file)
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
