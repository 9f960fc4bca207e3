// ONNX model -> IR (docs/design.md §2). The importer reads what PyTorch exporters write and attaches to
// every node the module instance it came from (Node::scope) and to the graph the classes of those
// instances (Graph::modules), from whichever annotation the file carries:
//
//   "functions"  ONNX local functions (torch.onnx.export(export_modules_as_functions=...)). Calls
//                are inlined (inner values renamed `<call node>/<name>`, formal inputs, outputs and
//                attribute references bound); each inlined node gets the call's instance path,
//                recovered from the parameters the call consumes: the common module prefix of the
//                owners of the parameters its body reads directly (`...attn.Wqkv.weight` ->
//                `...attn.Wqkv`) and of the parents of the instances of its nested calls
//                (`transformer.blocks.3.attn` -> `transformer.blocks.3`). With
//                `foundry.module_classes` the path is walked up to the nearest module of the
//                function's class (op_type without its `.N` variant suffix). A call that consumes
//                no parameter takes, inside its caller's instance, the k-th shallowest module of
//                its class in `foundry.module_classes` (k = how many such calls of that class the
//                caller made before it); without the table, or with no such module, its nodes keep
//                the caller's path (no module is invented). Top-level nodes keep their scoped
//                names' paths, as in "scopes". Without the table, an instance's class is the
//                function's domain (the Python module) + its name. Without the table, a nested
//                call whose parameters all belong to one module two or more levels below its
//                caller is the caller's child on the way there (BERT's `intermediate`, which
//                reads only `intermediate.dense`), unless the caller itself reads parameters
//                inside that child; a top-level call with a scoped name (torch names it after the
//                scope of its body's last node) is the common module of that scope and the
//                owners. A function output no body node writes (torch 1.13 hoists LayerNorm's
//                None bias so) is an omitted input where only optional input slots read it, else
//                an error; a call with more inputs than its function declares is an error.
//   "scopes"     TorchScript scoped node names (`/transformer/blocks.0/attn/Wqkv/MatMul` ->
//                `transformer.blocks.0.attn.Wqkv`). Paths are resolved segment by segment against
//                `foundry.scopes` / `foundry.module_classes` when present (torch names a module
//                relative to its caller, not its parent), else the segments are joined with '.'.
//   "metadata"   The dynamo exporter's NodeProto.metadata_props (field 9):
//                `pkg.torch.onnx.name_scopes` / `pkg.torch.onnx.class_hierarchy`.
//   "foundry"    foundry's own export (onnx_export.h): `scope=` in each node's doc_string and the
//                module table in `foundry.module_classes`, restored verbatim.
//   "none"       No annotation: Graph::modules stays empty and every scope is "".
// The format found is recorded in Graph::metadata["foundry.annotation_format"].
//
// Graph::modules holds every module on the call chain of some node (root "" included), with its
// classes from `foundry.module_classes` when the file has it, else from the annotation itself
// (class_hierarchy; the function's domain + name) or none (scoped names alone name no class).
// A root-level Constant node whose readers all lie inside one module moves into the deepest such
// module: TorchScript leaves many constants unscoped, and the functions export has them inside the
// module bodies.
//
// Trainable parameters: `foundry.parameters` (JSON list) if present; else the PARAMETER entries of
// `pkg.torch.export.ExportedProgram.graph_signature`; else every floating-point initializer, with
// a warning in Graph::metadata[kImportWarningKey].
// Parameters (and buffers) exported by shape only (export_params=False) are graph inputs; those
// named by the lists above, by `foundry.buffers`, or as `<module path>.<name>` of a module in
// `foundry.module_classes` become initializers without data.
//
// Bad input is a one-line error, never a crash: ImportOnnx reads only a regular file (a
// directory, device, FIFO or socket is refused before it is opened) of at most 2 GiB; every name,
// metadata key and value must be UTF-8 (the error names the field); external data must resolve,
// symlinks followed, to a regular file inside the model's folder. Names in messages go through
// QuoteName (base/quote.h): control characters and invalid bytes print as \xNN.
//
// Accepted: IR versions 7-10, ai.onnx opsets 13-20. ONNX 1.12's graph and function checks run on
// IR <= 8 / opset <= 17; the importer's own structural checks (every input defined before use,
// one producer per value, outputs produced) run on every model. Ops are not checked here: shape
// inference reports the ones foundry does not implement.
//
// The parts (compiler/import_*.h, internal): import_checks (protobuf, versions, structure, --dim),
// import_params (the trainable set), import_annotation (one reader per format: import_scopes,
// import_metadata, import_foundry, import_functions, which also inlines calls in any format),
// import_context (the state they share).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "base/status.h"
#include "compiler/ir.h"

namespace foundry {

struct ImportOptions {
  // --dim bindings: a symbolic dimension named here becomes this size. Naming a dimension the
  // model does not have is an error (it is almost always a typo).
  std::map<std::string, int64_t> dims;
  // False: trainable parameters are declared by shape only (Value::data null); buffers and other
  // initializers are still loaded (shape arithmetic may need them).
  bool load_weights = true;
  // False accepts any IR version >= 3 and any ai.onnx opset (the ONNX backend node tests are
  // written against old opsets); the op semantics are then the caller's concern.
  bool check_versions = true;
  // Run ONNX 1.12's checker where it understands the model (IR <= 8, opset <= 17).
  bool run_checker = true;
};

// Graph::metadata key of a warning the importer has for the user (one line, names escaped), absent
// when there is none. Today: the model declares no trainable set, so every floating-point
// initializer trains (the message counts them and names the ones not called *.weight / *.bias).
// A key of this name in the file itself is dropped, and ExportOnnx does not write it.
inline constexpr const char* kImportWarningKey = "foundry.import_warning";
// Graph::metadata key listing the sizes torch specialised at export that the dimension bindings
// changed ("'16' -> 12, '2' -> 3"); a shape error after import mentions them.
inline constexpr const char* kRespecialisedDimsKey = "foundry.respecialised_dims";

StatusOr<Graph> ImportOnnx(const std::string& path, const ImportOptions& options = {});

// The same, from the bytes of a model file. `model_dir` is where external data files live;
// `display_name` names the model in error messages.
StatusOr<Graph> ImportOnnxFromBytes(std::string_view bytes, const ImportOptions& options = {},
                                    const std::string& model_dir = "",
                                    const std::string& display_name = "<memory>");

}  // namespace foundry
