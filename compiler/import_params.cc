#include "compiler/import_params.h"

#include <algorithm>

#include "base/quote.h"
#include "compiler/onnx_proto_util.h"

namespace foundry {
namespace import_internal {

Status ParameterClassifier::Read(const ImportContext& ctx) {
  const auto& metadata = ctx.g.metadata;
  if (metadata.count(kParametersKey)) {
    ASSIGN_OR_RETURN(listed_params_, ctx.MetadataStringList(kParametersKey));
    have_param_list_ = true;
  }
  if (metadata.count(kBuffersKey)) {
    ASSIGN_OR_RETURN(auto buffers, ctx.MetadataStringList(kBuffersKey));
    listed_buffers_.insert(buffers.begin(), buffers.end());
  }
  if (have_param_list_) return Status::Ok();
  if (metadata.count(kGraphSignatureKey)) ParseGraphSignature(metadata.at(kGraphSignatureKey));
  constexpr const char* kInputSpecKind = "pkg.torch.export.graph_signature.InputSpec.kind";
  const onnx::GraphProto& graph = ctx.m.graph();
  for (const auto* values : {&graph.input(), &graph.value_info()})
    for (const onnx::ValueInfoProto& v : *values)
      for (const auto& [key, value] : onnx_util::ValueInfoMetadataProps(v))
        if (key == kInputSpecKind) AddInputSpecKind(v.name(), value);
  return Status::Ok();
}

void ParameterClassifier::AddInputSpecKind(const std::string& name, const std::string& kind) {
  if (kind == "PARAMETER") {
    have_signature_ = true;
    signature_params_.insert(name);
  } else if (kind == "BUFFER" || kind == "CONSTANT_TENSOR") {
    have_signature_ = true;
    signature_buffers_.insert(name);
  }
}

// One input per line:
//   p_transformer_wte_weight: PARAMETER target='transformer.wte.weight'
//   b_mask: BUFFER target='mask' persistent=True
void ParameterClassifier::ParseGraphSignature(const std::string& text) {
  for (std::string_view line : SplitLines(text)) {
    size_t colon = line.find(':');
    size_t target = line.find("target='");
    if (colon == std::string::npos || target == std::string::npos) continue;
    size_t close = line.find('\'', target + 8);
    if (close == std::string::npos) continue;
    std::string placeholder(line.substr(0, colon));
    placeholder.erase(0, placeholder.find_first_not_of(" \t"));
    std::string_view kind = line.substr(colon + 1, target - colon - 1);
    std::string name(line.substr(target + 8, close - target - 8));
    if (kind.find("PARAMETER") != std::string::npos) {
      have_signature_ = true;
      signature_params_.insert(name);
      signature_params_.insert(placeholder);
    } else if (kind.find("BUFFER") != std::string::npos ||
               kind.find("CONSTANT_TENSOR") != std::string::npos) {
      have_signature_ = true;
      signature_buffers_.insert(name);
      signature_buffers_.insert(placeholder);
    }
  }
}

bool ParameterClassifier::IsDeclaredInitializer(const std::string& name,
                                                const ClassTable& table) const {
  if (listed_buffers_.count(name) || signature_params_.count(name) ||
      signature_buffers_.count(name))
    return true;
  if (std::find(listed_params_.begin(), listed_params_.end(), name) != listed_params_.end())
    return true;
  // `transformer.alibi_slopes`: named as an attribute of a module the exporter listed. A run-time
  // input is never named so.
  std::string owner = ParentPath(name);
  return table.present && !owner.empty() && table.Find(owner) != nullptr;
}

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Without a declared set: a module's weight or bias, or a weight torch's constant folding renamed
// (onnx::MatMul_123: a Linear's transposed weight). A module's other tensors (inv_freq,
// alibi_slopes, a mask) are buffers.
bool NamedLikeAParameter(const std::string& name) {
  return EndsWith(name, ".weight") || EndsWith(name, ".bias") || name.rfind("onnx::", 0) == 0;
}

}  // namespace

std::vector<std::string> ParameterClassifier::Trainable(
    const std::vector<std::string>& initializers,
    const std::function<int32_t(const std::string&)>& elem_type) const {
  std::unordered_set<std::string> trainable;
  if (have_param_list_) {
    trainable.insert(listed_params_.begin(), listed_params_.end());
  } else if (have_signature_) {
    trainable = signature_params_;
  }
  std::vector<std::string> out;
  for (const std::string& name : initializers) {
    bool is_param;
    if (have_param_list_ || have_signature_)
      is_param = trainable.count(name) != 0;
    else
      is_param = IsFloat(static_cast<DType>(elem_type(name))) && NamedLikeAParameter(name);
    if (is_param) out.push_back(name);
  }
  return out;
}

std::string ParameterClassifier::FallbackWarning(const std::string& display,
                                                 const std::vector<std::string>& trainable,
                                                 const std::vector<std::string>& frozen,
                                                 const std::vector<std::string>& non_finite) const {
  if (have_param_list_ || have_signature_ || (trainable.empty() && frozen.empty())) return "";
  std::string line = QuoteName(display) + " declares no trainable parameters (no " +
                     kParametersKey + ", no torch.export signature): training ";
  if (frozen.empty())
    return line + "all " + std::to_string(trainable.size()) +
           " floating-point initializers; use --freeze GLOB to keep buffers fixed";
  line += "the " + std::to_string(trainable.size()) +
          " floating-point initializers named *.weight or *.bias, not the " +
          std::to_string(frozen.size()) + " others (buffers): ";
  constexpr size_t kNamed = 8;
  for (size_t i = 0; i < frozen.size() && i < kNamed; ++i)
    line += (i ? ", " : "") + QuoteName(frozen[i]);
  if (frozen.size() > kNamed) line += " and " + std::to_string(frozen.size() - kNamed) + " more";
  if (!non_finite.empty())
    line += " (" + std::to_string(non_finite.size()) + " of them hold non-finite values)";
  return line + "; train one with --trainable GLOB";
}

}  // namespace import_internal
}  // namespace foundry
