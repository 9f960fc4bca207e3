// Internal to the ONNX importer: one reader per annotation format (see onnx_import.h for what
// each format is). A reader tells, for each node outside any function (function calls included),
// the chain of module instances it sits in; after all nodes it fills Graph::modules. Inlining the
// calls themselves is import_functions.h's, whatever the format.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/import_context.h"

namespace foundry {
namespace import_internal {

struct NodeAnnotation {
  // Module paths from the root to the node's instance; empty when the file names none.
  std::vector<std::string> chain;
  std::map<std::string, std::string> marks;  // Node::marks (foundry's own export only)
};

class AnnotationReader {
 public:
  virtual ~AnnotationReader() = default;
  // Recorded in Graph::metadata["foundry.annotation_format"].
  virtual const char* format() const = 0;
  // The annotation of a node of the top-level graph.
  virtual Status Read(const onnx::NodeProto& n, NodeAnnotation& out) = 0;
  // After every node is in ctx.g: completes scopes the file leaves out and fills Graph::modules.
  virtual void Finish(ImportContext& ctx) = 0;
};

// What the file carries, found by one pass over its top-level nodes.
struct AnnotationSignals {
  bool doc_string_scopes = false;  // foundry.scope_source == "doc_string"
  bool any_call = false;           // some top-level node calls a local function
  bool have_metadata = false;      // some top-level node has pkg.torch.onnx.name_scopes
  bool have_scoped_names = false;  // some top-level node is named "/..."
};

// The reader for the format the signals show: foundry > functions > metadata > scopes > none.
std::unique_ptr<AnnotationReader> MakeAnnotationReader(ImportContext& ctx,
                                                       const AnnotationSignals& signals);

// The readers, one per format (import_<format>.cc).
std::unique_ptr<AnnotationReader> MakeNoneReader();
std::unique_ptr<AnnotationReader> MakeScopesReader(ImportContext& ctx);
// Nodes without name_scopes fall back to `fallback` (null: no scope).
std::unique_ptr<AnnotationReader> MakeMetadataReader(ImportContext& ctx,
                                                     std::unique_ptr<AnnotationReader> fallback);
std::unique_ptr<AnnotationReader> MakeFoundryReader(ImportContext& ctx);
// Top-level nodes (calls included) are read by `top_level` (null: no scope).
std::unique_ptr<AnnotationReader> MakeFunctionsReader(std::unique_ptr<AnnotationReader> top_level);

// Shared by the formats that derive the module tree from the nodes (scopes, metadata, functions):
// root Constants move into the module of their readers, and Graph::modules gets every module on a
// recorded chain.
void FinishDerivedModules(ImportContext& ctx);

}  // namespace import_internal
}  // namespace foundry
