#include "compiler/import_annotation.h"

#include <unordered_map>

namespace foundry {
namespace import_internal {

namespace {

class NoneReader : public AnnotationReader {
 public:
  const char* format() const override { return "none"; }
  Status Read(const onnx::NodeProto&, NodeAnnotation& out) override {
    out.chain.clear();
    return Status::Ok();
  }
  // No annotation: Graph::modules stays empty.
  void Finish(ImportContext&) override {}
};

// TorchScript gives many Constant nodes no scope ("Constant_54" inside an attention block), and
// exports derived from its names inherit that. A constant belongs to whoever reads it: a root
// Constant whose readers all sit in one module moves to the deepest module containing them all
// (what the functions export, which keeps constants inside the bodies, says too).
void AttachRootConstants(ImportContext& ctx) {
  std::unordered_map<std::string, std::vector<const Node*>> readers;
  for (const Node& n : ctx.g.nodes)
    for (const auto& in : n.inputs)
      if (!in.empty()) readers[in].push_back(&n);
  for (Node& n : ctx.g.nodes) {
    if (n.op_type != "Constant" || !n.domain.empty() || !n.scope.empty() || n.outputs.size() != 1)
      continue;
    auto it = readers.find(n.outputs[0]);
    if (it == readers.end()) continue;
    std::vector<std::string> scopes;
    for (const Node* r : it->second) scopes.push_back(r->scope);
    std::string common = CommonModulePrefix(scopes);
    while (!common.empty() && !ctx.module_paths.count(common)) common = ParentPath(common);
    n.scope = common;
  }
}

}  // namespace

std::unique_ptr<AnnotationReader> MakeNoneReader() { return std::make_unique<NoneReader>(); }

void FinishDerivedModules(ImportContext& ctx) {
  AttachRootConstants(ctx);
  for (const auto& path : ctx.module_paths) {
    Module m;
    if (const auto* cls = ctx.table.Find(path)) {
      m.classes = *cls;
    } else {
      auto it = ctx.annotated_class.find(path);
      if (it != ctx.annotated_class.end()) m.classes = {it->second};
    }
    ctx.g.modules[path] = std::move(m);
  }
}

std::unique_ptr<AnnotationReader> MakeAnnotationReader(ImportContext& ctx,
                                                       const AnnotationSignals& signals) {
  if (signals.doc_string_scopes) return MakeFoundryReader(ctx);
  // Top-level nodes: the dynamo metadata where a node has it, else the scoped name.
  std::unique_ptr<AnnotationReader> names;
  if (signals.have_scoped_names) names = MakeScopesReader(ctx);
  std::unique_ptr<AnnotationReader> top_level =
      signals.have_metadata ? MakeMetadataReader(ctx, std::move(names)) : std::move(names);
  if (signals.any_call) return MakeFunctionsReader(std::move(top_level));
  return top_level ? std::move(top_level) : MakeNoneReader();
}

}  // namespace import_internal
}  // namespace foundry
