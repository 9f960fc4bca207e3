// The "foundry" format: foundry's own export (onnx_export.h).
#include "compiler/import_annotation.h"

namespace foundry {
namespace import_internal {

namespace {

class FoundryReader : public AnnotationReader {
 public:
  const char* format() const override { return "foundry"; }

  // One "key=value" per line in the node's doc_string, "scope=<path>" and "mark.<key>=<value>";
  // values escape '\' and newlines.
  Status Read(const onnx::NodeProto& n, NodeAnnotation& out) override {
    std::string scope;
    out.marks.clear();
    for (std::string_view line : SplitLines(n.doc_string())) {
      size_t eq = line.find('=');
      if (eq == std::string::npos) continue;
      std::string key(line.substr(0, eq)), value;
      std::string_view raw = line.substr(eq + 1);
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '\\' && i + 1 < raw.size()) {
          ++i;
          value += raw[i] == 'n' ? '\n' : raw[i];
        } else {
          value += raw[i];
        }
      }
      if (key == "scope")
        scope = value;
      else if (key.rfind("mark.", 0) == 0)
        out.marks[key.substr(5)] = value;
    }
    out.chain = {scope};
    return Status::Ok();
  }

  // The module table is restored verbatim; scopes are never completed.
  void Finish(ImportContext& ctx) override {
    for (const auto& path : ctx.table.order)
      ctx.g.modules[path].classes = ctx.table.classes.at(path);
  }
};

}  // namespace

std::unique_ptr<AnnotationReader> MakeFoundryReader(ImportContext&) {
  return std::make_unique<FoundryReader>();
}

}  // namespace import_internal
}  // namespace foundry
