// Where a step's batch comes from: a token file (--data: llm.c's, nanoGPT's raw uint16, raw int32),
// synthetic tokens, or fixed --feed tensors; which input of a plan takes what, and how labels are
// formed from the token windows (ChooseDataSource).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "runtime/mds.h"

namespace foundry {

// The width and signedness of token ids in a --data file. kAuto (the --data-dtype default): an
// llm.c header says the width, a file without one is read as uint16. kUint32 is only what llm.c's
// llama-3 header (magic 20240801, version 7) declares; --data-dtype offers auto, uint16, int32.
enum class TokenDType { kUint16, kInt32, kAuto, kUint32 };
std::string_view TokenDTypeName(TokenDType t);  // "uint16", "int32", "auto", "uint32"
// "auto", "uint16" or "int32" (what --data-dtype accepts).
StatusOr<TokenDType> ParseTokenDType(std::string_view name);

// llm.c's token file (dev/data/data_common.py write_datafile, llmc/dataloader.h): a header of 256
// little-endian int32 (1024 bytes) -- [0] magic, [1] version, [2] the number of tokens -- then the
// tokens. GPT-2 files: magic 20240520, version 1, uint16 tokens (the only kind llm.c's C loader
// reads); llama-3 files: magic 20240801, version 7, uint32 tokens. 20240522 is its eval file
// (multiple-choice examples, not a token stream).
constexpr int32_t kLlmcMagicGpt2 = 20240520, kLlmcMagicLlama3 = 20240801, kLlmcMagicEval = 20240522;
constexpr int64_t kLlmcHeaderBytes = 256 * 4;

// The int32-read-as-uint16 guard (TokenFile::Open with kAuto on a file without a header): the
// first min(size, 1 MiB) bytes, rounded down to whole 4-byte pairs of uint16, must hold at least
// kInt32SniffMinPairs pairs; if in every pair the second (odd) uint16 is 0..3 and some first
// (even) one is 4 or more, the file is refused as int32 tokens -- little-endian int32 ids below
// 262,144 (every vocabulary up to Gemma's 256,000) have a high half of 0..3, while a uint16 token
// file would need every other token of the first 1,024 or more to be one of the ids 0..3. A file
// whose size is not a multiple of 4 cannot be int32 and is not tested. Not caught: an int32 file
// of fewer than 512 tokens (the vocabulary check then is the only guard).
constexpr int64_t kInt32SniffBytes = 1 << 20;
constexpr int64_t kInt32SniffMinPairs = 512;

// A token file, read window by window (the file is not held in memory, so it may be larger than
// RAM): llm.c's (header detected at offset 0, width from its version), or a flat, header-less file
// of little-endian ids (nanoGPT's np.uint16 .bin files; int32 with --data-dtype int32).
class TokenFile {
 public:
  // `dtype` kAuto, kUint16 or kInt32. A file starting with an llm.c token-file magic is read by
  // its header whatever `dtype` says, and an explicit dtype of another width than the header's is
  // an error; so is a header whose count disagrees with the file size, an unknown version, or
  // llm.c's eval file. Without a header: `dtype` (kAuto: uint16, after the int32 guard above).
  static StatusOr<TokenFile> Open(const std::string& path, TokenDType dtype);

  const std::string& path() const { return path_; }
  TokenDType dtype() const { return dtype_; }  // as read: kUint16, kInt32 or kUint32
  int64_t num_tokens() const { return num_tokens_; }
  int32_t llmc_version() const { return llmc_version_; }  // 0: no llm.c header
  int64_t width() const { return dtype_ == TokenDType::kUint16 ? 2 : 4; }
  // "llm.c v1 header, uint16, 1000 tokens", "no header, uint16, 1000 tokens"
  std::string DescribeFormat() const;

  // Window `k` (any k >= 0) of `window` tokens: window k % W of the W = num_tokens / window whole
  // windows in the file (a tail shorter than a window is never read). Every token is checked
  // against `vocab` (vocab <= 0: unchecked); an id outside [0, vocab) is an error naming its
  // position in the file (counted in tokens after any header).
  Status ReadWindow(int64_t k, int64_t window, int64_t vocab, int64_t* out) const;

  // The first `count` tokens against `vocab`, before any step: the error of ReadWindow, and for a
  // header-less int32 file, when reading the same bytes as uint16 puts every id in the
  // vocabulary, "; read as uint16 (--data-dtype uint16) its first N tokens are all in the
  // vocabulary". (The other way round cannot show: an int32 id in [0, vocab) read as uint16 gives
  // two halves in [0, vocab); the int32 guard of Open is what catches that.)
  Status CheckFirstTokens(int64_t count, int64_t vocab) const;

 private:
  // Reads `count` tokens from token `start` into `out`, checking them against `vocab`.
  Status Read(int64_t start, int64_t count, int64_t vocab, int64_t* out) const;

  std::string path_;
  TokenDType dtype_ = TokenDType::kUint16;
  int64_t num_tokens_ = 0;
  int32_t llmc_version_ = 0;
  int64_t header_bytes_ = 0;
};

// How the labels of token batches are formed (foundry-run --labels). kAuto, the plan's rule: a
// model with its own loss (plan loss_in_model: HF, llm-foundry) shifts the labels itself, so
// labels = input_ids = window[0:seq] ("same"); foundry's appended loss does not shift, so labels =
// window[1:seq+1] ("shifted"). A model whose own loss takes already-shifted targets (nanoGPT's
// cross_entropy(logits, targets)) needs --labels shifted. foundry does not change the rule from
// the graph, but warns when a model with its own loss slices no labels (DataSource::LabelsWarning).
enum class LabelRule { kAuto, kShifted, kSame };
std::string_view LabelRuleName(LabelRule r);  // "auto", "shifted", "same"
StatusOr<LabelRule> ParseLabelRule(std::string_view name);

// The one token check of --data and --feed: token ids index the embedding, so every id
// must lie in [0, vocab) (vocab <= 0: unchecked). ONNX Gather would read a negative id from the
// end (-1 as the last row), so neither path may let one through. The error: "`where`: token ID at
// position P`index` is outside the vocabulary [0, V)", P counted from `first`, `index` the
// caller's own words for the place (a fed tensor's "[0,5]"), or "".
std::string TokenOutsideVocabulary(const std::string& where, int64_t id, int64_t position,
                                   const std::string& index, int64_t vocab);

// Synthetic token t of window k: uniform in [0, vocab) from Philox(seed, FNV-1a("synthetic"),
// k * window + t), by Lemire's multiply-shift ((bits * vocab) >> 32).
void SyntheticWindow(uint64_t seed, int64_t k, int64_t window, int64_t vocab, int64_t* out);

// input_ids and labels ([batch, seq]) from batch windows of seq + 1 tokens each (row-major):
// input_ids = window[0:seq]; labels = window[1:seq+1] when `shift`, else window[0:seq] (LabelRule).
struct TokenBatch {
  Tensor input_ids;
  Tensor labels;
};
TokenBatch MakeTokenBatch(const std::vector<int64_t>& windows, int64_t batch, int64_t seq,
                          bool shift, DType ids_dtype, DType labels_dtype);
// The same batch written in place into `ids` and, unless null, `labels` (each [batch, seq], i64 or
// i32): a step's batch goes straight into the executor's input storage.
void WriteTokenBatch(const std::vector<int64_t>& windows, int64_t batch, int64_t seq, bool shift,
                     Tensor& ids, Tensor* labels);

// ---- the data source of a plan -------------------------------------------------------------

// How --data's MDS folder is read (llm-foundry's train_loader keys; foundry-run --shuffle ...).
struct MdsReadOptions {
  bool shuffle = false;                      // dataset.shuffle
  uint64_t shuffle_seed = 9176;              // dataset.shuffle_seed (streaming's default)
  int64_t shuffle_block = int64_t{1} << 18;  // dataset.shuffle_block_size, in samples
  bool drop_last = false;  // drop_last: an epoch ends after its last whole global batch
  std::string token_encoding_type = "int64";  // dataset.token_encoding_type (bytes columns)
};
// Whether `path` names an MDS folder (a directory) rather than a token file.
bool IsMdsFolder(const std::string& path);

// Which input takes what. Token batches (token windows from --data or synthetic) fill the token
// input and, from the same windows, the labels; every other input is fed.
struct DataSource {
  std::string tokens_input;   // the input an embedding Gather takes as indices, else "input_ids" if
                              // the plan has it, else ""
  std::string labels_input;   // "labels" if the plan has it, else ""
  std::set<std::string> fed;  // the inputs given by --feed
  // --data's file when token batches come from one; none: synthetic tokens (or no token batches).
  std::optional<TokenFile> file;
  // --data's MDS folder when token batches come from one, and the order its samples are read in
  // (SetMdsEpoch). Window k is sample mds_order->Sample(k) cut to seq tokens (as llm-foundry cuts
  // at max_seq_len), then `mds_label_pad`: llm-foundry's labels end with the sample, so with
  // shifted labels the last one is the loss's ignore_index (a shorter sample is an error).
  std::shared_ptr<const MdsDataset> mds;
  std::shared_ptr<const MdsOrder> mds_order;
  MdsReadOptions mds_options;
  int64_t mds_label_pad = -100;
  // The token input's [batch, seq] (0 when it has no such shape); vocab: the rows of the
  // embedding that gathers it (0 when none does).
  int64_t batch = 0, seq = 0, vocab = 0;

  // Whether a step writes token batches (the token input is not fed).
  bool token_batches() const { return !tokens_input.empty() && !fed.count(tokens_input); }
  // Whether the labels come from the token windows too.
  bool labels_from_windows() const {
    return token_batches() && !labels_input.empty() && !fed.count(labels_input);
  }
  // "synthetic tokens (seed 0)", "--data FILE (no header, uint16, 1000 tokens)", "--feed",
  // "... + --feed"
  std::string Describe(uint64_t seed) const;

  // The labels: the rule asked for (--labels), the plan's (loss_in_model), and whether token
  // batches shift them (the one WriteTokenBatch follows).
  LabelRule label_rule = LabelRule::kAuto;
  bool loss_in_model = true;
  bool shift_labels = false;
  // Whether a Slice reads the labels input: how an HF or llm-foundry loss shifts its labels
  // (labels[..., 1:]); a nanoGPT-style loss (cross_entropy on already-shifted targets) has none.
  bool model_slices_labels = false;
  // How the labels are formed, for the run's first lines ("" when they do not come from the
  // token windows), e.g. "labels = input_ids (window[0:seq]): the model's own loss shifts them
  // (it slices 'labels', as HF and llm-foundry do)".
  std::string DescribeLabels() const;
  // A one-line warning, else "": --labels against the plan's rule (`shifted` on a model with its
  // own loss only when that loss slices the labels: a nanoGPT-style model needs `shifted`), or,
  // with the plan's rule, a model with its own loss that slices no labels (it may be nanoGPT
  // style, and would learn to copy its input), or --labels when no labels come from windows.
  std::string LabelsWarning() const;
};

// The data source of a training graph with inputs `inputs`, `fed` of them given by --feed, and
// the --data file (`data_path`, "" for none). An error (one line, saying which option to give)
// when an input would have no data, when token batches cannot fill the token input (its type,
// the labels' type, no vocabulary for synthetic tokens), when --data and a fed token input both
// give the tokens, or when the file is shorter than one window, or when an id of its first whole
// windows (up to 1 MiB of them) lies outside the vocabulary (TokenFile::CheckFirstTokens).
// `loss_in_model` (the plan's) and `labels` (--labels) decide whether labels are shifted.
StatusOr<DataSource> ChooseDataSource(const Graph& graph, const std::vector<std::string>& inputs,
                                      const std::set<std::string>& fed,
                                      const std::string& data_path, TokenDType data_dtype,
                                      bool loss_in_model = true,
                                      LabelRule labels = LabelRule::kAuto,
                                      const MdsReadOptions& mds = {});

// The order of an MDS source's samples for a run whose steps read `global_batch` samples (batch
// x accumulation x ranks): with drop_last an epoch is its whole global batches. An error when
// the samples hold no whole global batch; nothing to do for other sources.
Status SetMdsEpoch(DataSource& source, int64_t global_batch);

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
