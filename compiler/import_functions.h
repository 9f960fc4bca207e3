// Internal to the ONNX importer: the "functions" format, ONNX local functions
// (torch.onnx.export(export_modules_as_functions=...)). Calls are inlined, whatever the file's
// annotation format, and each inlined node gets the module instance of its call (onnx_import.h
// says how the instance is found).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "compiler/import_context.h"

namespace foundry {
namespace import_internal {

class FunctionInliner {
 public:
  // Reads the model's functions; ctx.param_set, init_names, used_names and have_scoped_names must
  // be final before the first call.
  explicit FunctionInliner(ImportContext& ctx);

  // The function `n` calls, or null.
  const onnx::FunctionProto* Find(const onnx::NodeProto& n) const;

  // The call `n` of `f` neither recurses nor inlines to too many nodes.
  Status CheckExpansion(const onnx::FunctionProto& f, const onnx::NodeProto& n);

  // Appends to ctx.g.nodes the body of top-level call `n` of `f`, its attributes `attrs`, made in
  // the module chain `chain` (the call's own annotation).
  Status InlineTopLevel(const onnx::FunctionProto& f, const onnx::NodeProto& n,
                        const std::map<std::string, const onnx::AttributeProto*>& attrs,
                        const std::vector<std::string>& chain);

 private:
  struct CallFrame;

  int64_t ExpandedSize(const onnx::FunctionProto* f,
                       std::set<const onnx::FunctionProto*>& visiting);
  void DeriveOwners(const onnx::FunctionProto& f, const std::vector<std::string>& inputs,
                    bool use_buffers, int depth, std::vector<std::string>& owners);
  std::string ResolveInstance(const onnx::FunctionProto& f, const std::string& path) const;
  std::string InstancePath(const onnx::FunctionProto& f, const onnx::NodeProto& call,
                           const std::vector<std::string>& inputs, CallFrame& caller,
                           bool top_level, bool& identified);
  Status Inline(const onnx::FunctionProto& f, const onnx::NodeProto& call,
                const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                const std::map<std::string, const onnx::AttributeProto*>& attrs, CallFrame& caller,
                bool top_level, int depth);

  ImportContext& ctx_;
  std::map<std::pair<std::string, std::string>, const onnx::FunctionProto*> functions_;
  std::vector<std::pair<std::string, std::string>> call_stack_;
  std::map<const onnx::FunctionProto*, int64_t> expanded_size_;
};

}  // namespace import_internal
}  // namespace foundry
