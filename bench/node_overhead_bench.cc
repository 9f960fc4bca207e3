// The runtime's fixed costs: what a training step costs when the graph does almost
// nothing, and what each further node adds. Runs the real path, foundry-compile's library call
// (driver/compile.h: fold, canonicalize, autodiff with the appended loss, schedule, memory plan)
// and the Trainer (runtime/trainer.h: synthetic batch written into the inputs, the planned
// Executor, the finite check, AdamW), on
//
//   x0 = Gather(emb, input_ids)            emb f32[V, W], input_ids i64[1, 1]
//   x1 = Add(x0, c) ... xN = Add(xN-1, c)  c f32[W], a constant: N links of W floats each
//   logits = xN                            (foundry appends the cross-entropy over labels)
//
// N = 0 is the "empty" step: one Gather, the loss and its gradient, the embedding's gradient and
// an AdamW update of V·W floats. An Add of a constant has the identity as its gradient (autodiff
// adds no node for it) and canonicalize keeps it (it only removes Identity), so the training
// graph grows by one executed node per link; the per-node cost is the slope against N = 0:
// (step(N) - step(0)) / (nodes(N) - nodes(0)).
//
// Prints a markdown table (or, with --json, one JSON line per N): nodes in the training graph,
// median µs of the whole step (Trainer::Step, wall clock around it), of the graph alone
// (StepReport::graph_seconds: Executor::Run) and of the rest (batch, finite check, optimizer),
// and ns per node. Steps per N: after --warmup steps, as many as fit in --seconds (at least 20).
// Usage: node_overhead_bench [--links 0,100,1000,10000] [--threads 1] [--width 16] [--vocab 16]
//                            [--seconds 1] [--warmup 20] [--json]
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/text.h"
#include "driver/compile.h"
#include "kernels/cpu/parallel.h"
#include "runtime/loaded_plan.h"
#include "runtime/trainer.h"

namespace foundry {
namespace {

struct Row {
  int64_t links = 0;
  int64_t nodes = 0;  // in the training graph the executor runs
  int64_t steps = 0;
  double step_us = 0, graph_us = 0, rest_us = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string ChainText(int64_t links, int64_t vocab, int64_t width) {
  std::ostringstream t;
  t << "graph chain opset=17 {\n"
    << "  input input_ids : i64[1,1]\n"
    << "  param emb : f32[" << vocab << "," << width << "]\n"
    << "  const c : f32[" << width << "] = [";
  for (int64_t i = 0; i < width; ++i) t << (i ? ", " : "") << "0.001";
  t << "]\n  x0 = Gather(emb, input_ids)\n";
  for (int64_t i = 1; i <= links; ++i) t << "  x" << i << " = Add(x" << i - 1 << ", c)\n";
  t << "  output x" << links << "\n}\n";
  return t.str();
}

StatusOr<Row> Measure(int64_t links, int64_t vocab, int64_t width, double seconds, int64_t warmup) {
  ASSIGN_OR_RETURN(Graph model, ParseGraph(ChainText(links, vocab, width)));
  CompileRequest request;
  request.model = "chain" + std::to_string(links) + ".onnx";
  ASSIGN_OR_RETURN(CompileResult compiled, CompileImported(request, std::move(model)));
  LoadedPlan lp;
  lp.plan_path = "chain" + std::to_string(links) + ".plan";
  lp.plan = std::move(*compiled.plan);
  lp.graph = std::move(compiled.graph);
  Row row;
  row.links = links;
  row.nodes = static_cast<int64_t>(lp.graph.nodes.size());
  TrainerOptions options;
  options.optimizer.lr = 1e-4;  // tiny, so no step of a long run goes non-finite
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(std::move(lp), options));
  for (int64_t i = 0; i < warmup; ++i) RETURN_IF_ERROR(trainer->Step().status());
  std::vector<double> step_us, graph_us, rest_us;
  const auto start = std::chrono::steady_clock::now();
  while (step_us.size() < 20 ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
             seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(StepReport r, trainer->Step());
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    step_us.push_back(us);
    graph_us.push_back(r.graph_seconds * 1e6);
    rest_us.push_back(us - r.graph_seconds * 1e6);
  }
  row.steps = static_cast<int64_t>(step_us.size());
  row.step_us = Median(step_us);
  row.graph_us = Median(graph_us);
  row.rest_us = Median(rest_us);
  return row;
}

std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> v;
  std::stringstream s(text);
  for (std::string item; std::getline(s, item, ',');) v.push_back(std::atoll(item.c_str()));
  return v;
}

int Main(int argc, char** argv) {
  std::vector<int64_t> links = {0, 100, 1000, 10000};
  int64_t threads = 1, width = 16, vocab = 16, warmup = 20;
  double seconds = 1;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--json") {
      json = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "node_overhead_bench: error: " << flag << " needs a value\n";
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--links")
      links = ParseList(value);
    else if (flag == "--threads")
      threads = std::atoll(value.c_str());
    else if (flag == "--width")
      width = std::atoll(value.c_str());
    else if (flag == "--vocab")
      vocab = std::atoll(value.c_str());
    else if (flag == "--seconds")
      seconds = std::atof(value.c_str());
    else if (flag == "--warmup")
      warmup = std::atoll(value.c_str());
    else {
      std::cerr << "node_overhead_bench: error: unknown option " << flag << "\n";
      return 2;
    }
  }
  if (threads < 1 || width < 1 || vocab < 2 || warmup < 0 || seconds < 0 || links.empty() ||
      *std::min_element(links.begin(), links.end()) < 0) {
    std::cerr << "node_overhead_bench: error: --threads, --width >= 1, --vocab >= 2, --links "
                 ">= 0\n";
    return 2;
  }
  std::sort(links.begin(), links.end());
  SetAllCpuThreads(static_cast<int>(threads));
  std::vector<Row> rows;
  for (int64_t n : links) {
    StatusOr<Row> row = Measure(n, vocab, width, seconds, warmup);
    if (!row.ok()) {
      std::cerr << "node_overhead_bench: error: " << n << " links: " << row.status().message()
                << "\n";
      return 1;
    }
    rows.push_back(*row);
  }
  // The slope against the smallest chain (N = 0 by default): what one more node costs.
  const Row& base = rows.front();
  auto per_node_ns = [&](const Row& r, double Row::*field) {
    return r.nodes > base.nodes ? (r.*field - base.*field) * 1e3 / double(r.nodes - base.nodes)
                                : 0.0;
  };
  if (json) {
    for (const Row& r : rows)
      std::cout << "{\"links\":" << r.links << ",\"nodes\":" << r.nodes
                << ",\"threads\":" << threads << ",\"steps\":" << r.steps
                << ",\"step_us\":" << r.step_us << ",\"graph_us\":" << r.graph_us
                << ",\"rest_us\":" << r.rest_us
                << ",\"step_ns_per_node\":" << per_node_ns(r, &Row::step_us)
                << ",\"graph_ns_per_node\":" << per_node_ns(r, &Row::graph_us) << "}\n";
    return 0;
  }
  std::cout << "| threads | chain links | training-graph nodes | steps timed | step µs | graph µs "
               "| batch + check + optimizer µs | ns per node (step) | ns per node (graph) |\n"
            << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  char line[256];
  for (const Row& r : rows) {
    const bool slope = r.nodes > base.nodes;
    std::snprintf(
        line, sizeof line, "| %lld | %lld | %lld | %lld | %.2f | %.2f | %.2f | %s | %s |\n",
        static_cast<long long>(threads), static_cast<long long>(r.links),
        static_cast<long long>(r.nodes), static_cast<long long>(r.steps), r.step_us, r.graph_us,
        r.rest_us,
        slope ? std::to_string(int64_t(per_node_ns(r, &Row::step_us) + 0.5)).c_str() : "-",
        slope ? std::to_string(int64_t(per_node_ns(r, &Row::graph_us) + 0.5)).c_str() : "-");
    std::cout << line;
  }
  return 0;
}

}  // namespace
}  // namespace foundry

int main(int argc, char** argv) { return foundry::Main(argc, argv); }
