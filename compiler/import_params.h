// Internal to the ONNX importer: which initializers are trainable parameters, and which graph
// inputs are parameters or buffers exported by shape only (export_params=False).
//
// The trainable set is `foundry.parameters` (JSON list) if present; else the PARAMETER entries of
// `pkg.torch.export.ExportedProgram.graph_signature` and of the per-value InputSpec.kind entries
// (dynamo exports: exactly the PARAMETERs train); else the floating-point initializers named
// like parameters (*.weight, *.bias, onnx::*) that hold finite values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "compiler/import_context.h"

namespace foundry {
namespace import_internal {

class ParameterClassifier {
 public:
  // Reads `foundry.parameters`, `foundry.buffers` and torch.export's graph signature from the
  // graph's metadata, and the kind torch.export gives each graph input and value_info entry
  // (its metadata_props' pkg.torch.export.graph_signature.InputSpec.kind: PARAMETER, BUFFER,
  // CONSTANT_TENSOR, USER_INPUT), which counts as the signature.
  Status Read(const ImportContext& ctx);

  // A graph input named so is an initializer without data, not a run-time input: named by one of
  // the lists, or `<module path>.<name>` of a module in the class table.
  bool IsDeclaredInitializer(const std::string& name, const ClassTable& table) const;

  // The trainable parameters among `initializers`, in their order. `elem_type` gives an
  // initializer's TensorProto element type (used only without a list or signature).
  std::vector<std::string> Trainable(
      const std::vector<std::string>& initializers,
      const std::function<int32_t(const std::string&)>& elem_type) const;

  // When the model declares no trainable set (neither list nor signature), one line for the user:
  // what trains (`trainable`, Trainable()'s result less the non-finite ones) and the floating-point
  // initializers that do not (`frozen`: the buffers by name, then `non_finite`, those holding a
  // non-finite value, never a parameter), and --trainable. Empty otherwise.
  std::string FallbackWarning(const std::string& display, const std::vector<std::string>& trainable,
                              const std::vector<std::string>& frozen,
                              const std::vector<std::string>& non_finite) const;
  bool declares_parameters() const { return have_param_list_ || have_signature_; }

 private:
  // torch.export's `str(ExportGraphSignature)`.
  void ParseGraphSignature(const std::string& text);
  // A value's InputSpec.kind.
  void AddInputSpecKind(const std::string& name, const std::string& kind);

  std::vector<std::string> listed_params_;
  bool have_param_list_ = false;
  std::unordered_set<std::string> listed_buffers_;
  bool have_signature_ = false;
  std::unordered_set<std::string> signature_params_, signature_buffers_;
};

}  // namespace import_internal
}  // namespace foundry
