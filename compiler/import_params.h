// Internal to the ONNX importer: which initializers are trainable parameters, and which graph
// inputs are parameters or buffers exported by shape only (export_params=False).
//
// The trainable set is `foundry.parameters` (JSON list) if present; else the PARAMETER entries of
// `pkg.torch.export.ExportedProgram.graph_signature`; else every floating-point initializer.
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
  // graph's metadata.
  Status Read(const ImportContext& ctx);

  // A graph input named so is an initializer without data, not a run-time input: named by one of
  // the lists, or `<module path>.<name>` of a module in the class table.
  bool IsDeclaredInitializer(const std::string& name, const ClassTable& table) const;

  // The trainable parameters among `initializers`, in their order. `elem_type` gives an
  // initializer's TensorProto element type (used only without a list or signature).
  std::vector<std::string> Trainable(
      const std::vector<std::string>& initializers,
      const std::function<int32_t(const std::string&)>& elem_type) const;

 private:
  // torch.export's `str(ExportGraphSignature)`.
  void ParseGraphSignature(const std::string& text);

  std::vector<std::string> listed_params_;
  bool have_param_list_ = false;
  std::unordered_set<std::string> listed_buffers_;
  bool have_signature_ = false;
  std::unordered_set<std::string> signature_params_, signature_buffers_;
};

}  // namespace import_internal
}  // namespace foundry
