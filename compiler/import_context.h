// Internal to the ONNX importer (onnx_import.h): the state its parts share, and the small path
// helpers they all use. The parts are the version and structure checks (import_checks.h), the
// parameter classification (import_params.h) and one reader per annotation format
// (import_annotation.h, import_functions.h).
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/quote.h"
#include "base/status.h"
#include "compiler/ir.h"
#include "compiler/onnx_import.h"

namespace foundry {
namespace import_internal {

inline constexpr const char* kModuleClassesKey = "foundry.module_classes";
inline constexpr const char* kParametersKey = "foundry.parameters";
inline constexpr const char* kBuffersKey = "foundry.buffers";
inline constexpr const char* kScopesKey = "foundry.scopes";
inline constexpr const char* kInitializerOrderKey = "foundry.initializers";
inline constexpr const char* kScopeSourceKey = "foundry.scope_source";
inline constexpr const char* kFormatKey = "foundry.annotation_format";
inline constexpr const char* kGraphSignatureKey =
    "pkg.torch.export.ExportedProgram.graph_signature";
inline constexpr const char* kNameScopesKey = "pkg.torch.onnx.name_scopes";
inline constexpr const char* kClassHierarchyKey = "pkg.torch.onnx.class_hierarchy";
inline constexpr const char* kExportHint = "pass a .onnx file exported with torch.onnx.export";

// "transformer.blocks.0.attn.Wqkv.weight" -> "transformer.blocks.0.attn.Wqkv"; "w" -> "".
std::string ParentPath(const std::string& path);
// `path` lies strictly inside `module` ("" contains everything).
bool IsInside(const std::string& path, const std::string& module);
int Depth(const std::string& path);
std::string CommonModulePrefix(const std::vector<std::string>& paths);
// "MultiheadAttention.1" -> "MultiheadAttention": torch's call-site variants of one class.
std::string StripVariant(const std::string& op_type);
// Newlines become spaces, trailing spaces go: a message from a library on one line.
std::string OneLine(std::string s);
// The lines of `text` split at '\n' (views into it; a final empty line is not one).
std::vector<std::string_view> SplitLines(std::string_view text);

// Module class table (`foundry.module_classes`), in the exporter's named_modules() order.
struct ClassTable {
  bool present = false;
  std::vector<std::string> order;
  std::unordered_map<std::string, std::vector<std::string>> classes;

  const std::vector<std::string>* Find(const std::string& path) const;
  bool HasClass(const std::string& path, const std::string& bare) const;
};

// What every part of the importer reads or adds to.
struct ImportContext {
  ImportContext(const onnx::ModelProto& model, const ImportOptions& options, std::string dir,
                std::string display)
      : m(model), opts(options), dir(std::move(dir)), display(std::move(display)) {}

  const onnx::ModelProto& m;
  const ImportOptions& opts;
  std::string dir;      // where external data lives
  std::string display;  // the model's name in messages
  Graph g;

  ClassTable table;                            // foundry.module_classes
  std::map<std::string, std::string> scopes;   // foundry.scopes
  std::unordered_set<std::string> param_set;   // trainable parameters
  std::unordered_set<std::string> init_names;  // every initializer
  std::unordered_set<std::string> used_names;  // value names taken in the file
  bool have_scoped_names = false;              // some top-level node is named "/..."
  // Every module on the call chain of some node, and the classes the annotation itself gives.
  std::set<std::string> module_paths;
  std::map<std::string, std::string> annotated_class;

  Status Fail(const std::string& what) const { return Error(QuoteName(display) + ": " + what); }
  // `base`, or `base_N` when taken; the result is taken from then on.
  std::string NewValueName(const std::string& base);
  void RecordChain(const std::vector<std::string>& chain);
  // `node` describes the attribute's node in messages.
  StatusOr<Attribute> ConvertAttr(const onnx::AttributeProto& a, const std::string& node) const;
  // Model metadata `key` (present) as a JSON list of strings.
  StatusOr<std::vector<std::string>> MetadataStringList(const std::string& key) const;
};

// Copies the model's metadata into the graph and reads the module tables every annotation
// reader may use: `foundry.module_classes` and `foundry.scopes`.
Status ReadModuleTables(ImportContext& ctx);

}  // namespace import_internal
}  // namespace foundry
