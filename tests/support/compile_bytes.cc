#include "tests/support/compile_bytes.h"

#include "compiler/onnx_export.h"
#include "compiler/onnx_import.h"
#include "kernels/cpu/kernel.h"
#include "passes/memory_plan.h"
#include "passes/memory_report.h"
#include "passes/pipeline.h"
#include "runtime/interpreter.h"

namespace foundry {

namespace {

CompileBytesResult CompileOnce(std::string_view bytes, const CompileBytesOptions& options) {
  ImportOptions import_options;
  import_options.dims = options.dims;
  StatusOr<Graph> graph = ImportOnnxFromBytes(bytes, import_options, options.model_dir, "mutant");
  if (!graph.ok()) return {graph.status(), "import"};

  CompileOptions compile;
  compile.fold.dims = options.dims;
  Status st = RunPasses(*graph, BuildPipeline(compile), PipelineOptions{});
  if (!st.ok()) return {st, "compile"};

  // What foundry-compile does next: the memory plan (its checker runs inside) and the report.
  StatusOr<MemoryPlan> memory = PlanMemory(*graph, {{"cpu", CpuWorkspaceBytes}});
  if (!memory.ok()) return {memory.status(), "plan"};
  StatusOr<MemoryReport> report = BuildMemoryReport(*graph, *memory, "cpu", "mutant", options.dims);
  if (!report.ok()) return {report.status(), "plan"};

  StatusOr<std::string> exported = ExportOnnxToBytes(*graph);
  if (!exported.ok()) return {exported.status(), "export"};

  if (options.max_run_bytes <= 0) return {Status::Ok(), "done"};
  // Zero inputs are valid token ids and labels; the point is that every kernel runs on the shapes
  // the compiler inferred, not the numbers.
  int64_t total = 0;
  for (const auto& [name, v] : graph->values()) {
    int64_t b = v.NumBytes();
    if (b < 0 || __builtin_add_overflow(total, b, &total) || total > options.max_run_bytes)
      return {Status::Ok(), "done"};
  }
  std::map<std::string, Tensor> feeds;
  for (const auto& in : graph->inputs) {
    const Value* v = graph->FindValue(in);
    if (!v || v->data) continue;
    StatusOr<Tensor> t = Tensor::Allocate(v->dtype, v->shape);
    if (!t.ok()) return {t.status(), "run"};
    feeds.emplace(in, std::move(*t));
  }
  auto run = Interpret(*graph, feeds);
  if (!run.ok()) return {run.status(), "run"};
  return {Status::Ok(), "done"};
}

}  // namespace

CompileBytesResult CompileBytes(std::string_view bytes, const CompileBytesOptions& options) {
  CompileBytesOptions o = options;
  for (;;) {
    CompileBytesResult r = CompileOnce(bytes, o);
    const std::string& m = r.status.message();
    const std::string ask = "pass --dim ";
    size_t at = m.find(ask);
    if (r.status.ok() || at == std::string::npos) return r;
    size_t eq = m.find("=N", at);
    if (eq == std::string::npos) return r;
    std::string name = m.substr(at + ask.size(), eq - at - ask.size());
    if (name.empty() || o.dims.count(name)) return r;
    o.dims[name] = 4;
  }
}

}  // namespace foundry
