// foundry-compile: reads an exported model, builds the training graph and writes the plan.
// A thin main: option parsing here, everything else in the libraries.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "compiler/module_tree.h"
#include "compiler/onnx_export.h"
#include "compiler/onnx_import.h"
#include "compiler/op_schema.h"
#include "compiler/plan.h"
#include "passes/fold.h"
#include "passes/pipeline.h"

namespace fs = std::filesystem;
using namespace foundry;

namespace {

int Fail(const std::string& message) {
  std::cerr << "foundry-compile: error: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "foundry-compile: compile an ONNX transformer into a training plan.\n"
      "Writes PREFIX.train.onnx (the training graph: forward, loss, backward) and PREFIX.plan."};
  std::string model;
  std::string prefix;
  bool list_modules = false, list_ops = false, forward_only = false;
  std::vector<std::string> dim_specs, freeze, trainable;
  int64_t fold_limit = 1 << 20;
  std::string dump_after;
  app.add_option("model", model, "the exported model (.onnx)")->required();
  app.add_option("-o,--output", prefix, "output prefix: writes PREFIX.train.onnx and PREFIX.plan");
  app.add_flag("--list-modules", list_modules,
               "print the module tree (path, class, --ckpt keys, nodes, parameter bytes) and exit");
  app.add_flag("--list-ops", list_ops, "print the operators foundry supports and exit");
  app.add_option("--dim", dim_specs, "bind a symbolic dimension, e.g. --dim batch=8 --dim seq=2048")
      ->type_name("NAME=VALUE");
  app.add_option("--freeze", freeze, "do not train parameters matching this glob (repeatable)")
      ->type_name("GLOB");
  app.add_option("--trainable", trainable,
                 "also train initializers matching this glob (repeatable)")
      ->type_name("GLOB");
  app.add_flag("--forward-only", forward_only, "compile the forward graph only (no loss/backward)");
  app.add_option("--fold-limit", fold_limit,
                 "largest tensor constant folding may create, in bytes (bigger ones are "
                 "computed at run time)")
      ->capture_default_str();
  app.add_option("--dump-after", dump_after,
                 "print the IR (text form) after this pass: fold, canonicalize, autodiff")
      ->type_name("PASS");
  // Let the model path be validated by the importer, which words the error itself.
  CLI11_PARSE(app, argc, argv);

  if (list_ops) {
    for (const OpSchema* s : OpSchemas().All())
      std::cout << (s->domain.empty() ? "" : s->domain + "::") << s->op_type << "\n";
    return 0;
  }

  auto dims = ParseDimSpecs(dim_specs);
  if (!dims.ok()) return Fail(dims.status().message());

  ImportOptions import_options;
  import_options.dims = *dims;
  auto graph = ImportOnnx(model, import_options);
  if (!graph.ok()) return Fail(graph.status().message());

  if (list_modules) {
    if (graph->modules.empty())
      return Fail("'" + model +
                  "' carries no module annotations; export it with models/export_mpt.py "
                  "(--annotations scopes or functions), or with torch.onnx.export(..., "
                  "export_modules_as_functions=...) / torch >= 2.5's dynamo exporter");
    std::cout << FormatModuleTree(ListModules(*graph));
    return 0;
  }
  if (auto w = graph->metadata.find(kImportWarningKey); w != graph->metadata.end() && !forward_only)
    std::cerr << "foundry-compile: warning: " << w->second << "\n";

  if (!prefix.empty()) {
    std::error_code ec;
    fs::path train = prefix + ".train.onnx";
    if (fs::exists(train, ec) && fs::equivalent(train, model, ec))
      return Fail("output '" + train.string() + "' is the input model; choose another -o PREFIX");
    fs::path parent = fs::path(prefix).parent_path();
    if (!parent.empty() && !fs::exists(parent, ec) && !fs::create_directories(parent, ec))
      return Fail("cannot create output directory '" + parent.string() + "': " + ec.message());
  }

  CompileOptions options;
  options.fold.dims = *dims;
  options.fold.max_folded_bytes = fold_limit;
  options.parameters.freeze = freeze;
  options.parameters.trainable = trainable;
  options.training = !forward_only;
  PipelineOptions pipeline;
  pipeline.log = &std::cout;
  pipeline.dump_after = dump_after;
  pipeline.dump = &std::cout;

  std::cout << "foundry-compile " << model << "\n";
  Status st = RunPasses(*graph, BuildPipeline(options), pipeline);
  if (!st.ok()) return Fail(st.message());

  if (prefix.empty()) {
    std::cout << "(no -o PREFIX given: nothing written)\n";
    return 0;
  }
  std::string graph_file = prefix + ".train.onnx";
  st = ExportOnnx(*graph, graph_file);
  if (!st.ok()) return Fail(st.message());
  if (!forward_only) {
    Plan plan;
    plan.graph_file = fs::path(graph_file).filename().string();
    plan.source_model = model;
    plan.loss = graph->metadata["foundry.loss"];
    plan.loss_in_model = graph->metadata.count("foundry.loss_appended") == 0;
    plan.inputs = graph->inputs;
    plan.parameters = graph->parameters;
    for (size_t i = 0; i < graph->parameters.size(); ++i)
      plan.gradients[graph->parameters[i]] = graph->outputs[i + 1];
    plan.dims = *dims;
    st = WritePlan(plan, prefix + ".plan");
    if (!st.ok()) return Fail(st.message());
    std::cout << "wrote " << graph_file << " and " << prefix << ".plan\n";
  } else {
    std::cout << "wrote " << graph_file << "\n";
  }
  return 0;
}
