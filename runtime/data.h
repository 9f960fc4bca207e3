// Where a step's batch comes from: a flat token file (--data), synthetic tokens, or fixed
// --feed tensors; and which input of a plan takes what (ChooseDataSource).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"

namespace foundry {

enum class TokenDType { kUint16, kInt32 };
std::string_view TokenDTypeName(TokenDType t);  // "uint16", "int32"
StatusOr<TokenDType> ParseTokenDType(std::string_view name);

// A flat, header-less file of little-endian token ids, read window by window (the file is not
// held in memory, so it may be larger than RAM).
class TokenFile {
 public:
  static StatusOr<TokenFile> Open(const std::string& path, TokenDType dtype);

  const std::string& path() const { return path_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_tokens() const { return num_tokens_; }

  // Window `k` (any k >= 0) of `window` tokens: window k % W of the W = num_tokens / window whole
  // windows in the file (a tail shorter than a window is never read). Every token is checked
  // against `vocab` (vocab <= 0: unchecked); an id outside [0, vocab) is an error naming its
  // position in the file.
  Status ReadWindow(int64_t k, int64_t window, int64_t vocab, int64_t* out) const;

 private:
  std::string path_;
  TokenDType dtype_ = TokenDType::kUint16;
  int64_t num_tokens_ = 0;
};

// The one token check of --data and --feed (issue 19): token ids index the embedding, so every id
// must lie in [0, vocab) (vocab <= 0: unchecked). ONNX Gather would read a negative id from the
// end (-1 as the last row), so neither path may let one through. The error: "`where`: token ID at
// position P`index` is outside the vocabulary [0, V)", P counted from `first`, `index` the
// caller's own words for the place (a fed tensor's "[0,5]"), or "".
std::string TokenOutsideVocabulary(const std::string& where, int64_t id, int64_t position,
                                   const std::string& index, int64_t vocab);

// Synthetic token t of window k: uniform in [0, vocab) from Philox(seed, FNV-1a("synthetic"),
// k * window + t), by Lemire's multiply-shift ((bits * vocab) >> 32).
void SyntheticWindow(uint64_t seed, int64_t k, int64_t window, int64_t vocab, int64_t* out);

// input_ids and labels ([batch, seq]) from batch windows of seq + 1 tokens each (row-major), by
// the rule in runtime/trainer.h (step 1).
struct TokenBatch {
  Tensor input_ids;
  Tensor labels;
};
TokenBatch MakeTokenBatch(const std::vector<int64_t>& windows, int64_t batch, int64_t seq,
                          bool loss_in_model, DType ids_dtype, DType labels_dtype);
// The same batch written in place into `ids` and, unless null, `labels` (each [batch, seq], i64 or
// i32): a step's batch goes straight into the executor's input storage.
void WriteTokenBatch(const std::vector<int64_t>& windows, int64_t batch, int64_t seq,
                     bool loss_in_model, Tensor& ids, Tensor* labels);

// ---- the data source of a plan -------------------------------------------------------------

// Which input takes what. Token batches (token windows from --data or synthetic) fill the token
// input and, from the same windows, the labels; every other input is fed.
struct DataSource {
  std::string tokens_input;   // the input an embedding Gather takes as indices, else "input_ids" if
                              // the plan has it, else ""
  std::string labels_input;   // "labels" if the plan has it, else ""
  std::set<std::string> fed;  // the inputs given by --feed
  // --data's file when token batches come from one; none: synthetic tokens (or no token batches).
  std::optional<TokenFile> file;
  // The token input's [batch, seq] (0 when it has no such shape); vocab: the rows of the
  // embedding that gathers it (0 when none does).
  int64_t batch = 0, seq = 0, vocab = 0;

  // Whether a step writes token batches (the token input is not fed).
  bool token_batches() const { return !tokens_input.empty() && !fed.count(tokens_input); }
  // Whether the labels come from the token windows too.
  bool labels_from_windows() const {
    return token_batches() && !labels_input.empty() && !fed.count(labels_input);
  }
  // "synthetic tokens (seed 0)", "--data FILE (uint16, 1000 tokens)", "--feed", "... + --feed"
  std::string Describe(uint64_t seed) const;
};

// The data source of a training graph with inputs `inputs`, `fed` of them given by --feed, and
// the --data file (`data_path`, "" for none). An error (one line, saying which option to give)
// when an input would have no data, when token batches cannot fill the token input (its type,
// the labels' type, no vocabulary for synthetic tokens), when --data and a fed token input both
// give the tokens, or when the file is shorter than one window.
StatusOr<DataSource> ChooseDataSource(const Graph& graph, const std::vector<std::string>& inputs,
                                      const std::set<std::string>& fed,
                                      const std::string& data_path, TokenDType data_dtype);

// The token windows of one step, row b reading window `position + b` (of seq + 1 tokens) of the
// file or of the synthetic stream (`seed`), into `windows` (batch * (seq + 1) ids).
Status ReadStepWindows(const DataSource& source, uint64_t seed, int64_t position,
                       std::vector<int64_t>& windows);

// ---- feeds ---------------------------------------------------------------------------------

// One --feed NAME=FILE.pb.
struct Feed {
  std::string spec;  // as given, for messages
  std::string name;
  Tensor tensor;
};
// Parses NAME=FILE.pb and reads the TensorProto file.
StatusOr<Feed> ReadFeed(const std::string& spec);
// The feed names one of `inputs` and matches its dtype and shape exactly.
Status CheckFeed(const Feed& feed, const Graph& graph, const std::vector<std::string>& inputs);
// A fed token input (the DataSource's tokens_input, i64 or i32; `spec` its --feed NAME=FILE.pb)
// against the vocabulary, with --data's rule and message: every id in [0, vocab) (vocab <= 0:
// unchecked). Labels are not token ids here (they may hold ignore_index; the loss kernel checks
// them).
Status CheckFedTokens(const std::string& spec, const Tensor& tokens, int64_t vocab);

}  // namespace foundry
