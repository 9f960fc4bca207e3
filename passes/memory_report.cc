#include "passes/memory_report.h"

#include <algorithm>
#include <cctype>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "base/bytes.h"
#include "compiler/op_schema.h"
#include "passes/schedule.h"

namespace foundry {
namespace {

int64_t RoundUp(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// "blocks.2" before "blocks.10": runs of digits compare by value, the rest byte by byte.
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ei = i, ej = j;
      while (ei < a.size() && digit(a[ei])) ++ei;
      while (ej < b.size() && digit(b[ej])) ++ej;
      std::string_view na(a.data() + i, ei - i), nb(b.data() + j, ej - j);
      while (na.size() > 1 && na[0] == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb[0] == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j || (a.size() - i == b.size() - j && a < b);
}

Phase PhaseOrForward(const Node& node) { return PhaseOf(node).value_or(Phase::kForward); }

std::string QualifiedClass(const Graph& graph, const std::string& scope) {
  auto it = graph.modules.find(scope);
  return it == graph.modules.end() || it->second.classes.empty() ? "" : it->second.classes[0];
}

LayoutSummary Summarize(const Graph& graph, const MemoryPlan& plan, const BackendLayout& layout) {
  LayoutSummary s;
  s.backend = layout.backend;
  s.arena_bytes = layout.arena_bytes;
  s.lower_bound_bytes = layout.lower_bound_bytes;
  s.peak_step = layout.peak_step;
  if (layout.peak_step >= 0 && layout.peak_step < static_cast<int64_t>(graph.nodes.size()))
    s.peak_node = graph.nodes[layout.peak_step].name;
  s.total_bytes = plan.TotalBytes(layout);
  return s;
}

}  // namespace

// An op without a formula (none: a test holds every schema to one) counts one per output-0
// element.
int64_t NodeFlops(const Graph& graph, const Node& node) {
  if (!node.HasOutput(0)) return 0;
  const FlopContext context{graph, node};
  const OpSchema* schema = OpSchemas().Find(node.domain, node.op_type);
  return schema && schema->flops ? schema->flops(context) : context.output_elements();
}

FlopCounts CountFlops(const Graph& graph) {
  FlopCounts f;
  for (const Node& n : graph.nodes) {
    switch (PhaseOrForward(n)) {
      case Phase::kForward:
        f.forward += NodeFlops(graph, n);
        break;
      case Phase::kBackward:
        f.backward += NodeFlops(graph, n);
        break;
      case Phase::kRecompute:
        f.recompute += NodeFlops(graph, n);
        break;
      case Phase::kOptimizer:
        break;
    }
  }
  return f;
}

std::map<std::string, std::string> SavedBuffers(const Graph& graph, const MemoryPlan& plan) {
  std::unordered_map<std::string, size_t> producer;
  for (size_t s = 0; s < graph.nodes.size(); ++s)
    for (const auto& o : graph.nodes[s].outputs)
      if (!o.empty()) producer[o] = s;
  auto owner_of = [&](const std::string& v) -> const std::string& {
    auto a = plan.alias.find(v);
    return a == plan.alias.end() ? v : a->second.owner;
  };
  // The bytes the backward reads were written by the saved value with views followed back (an
  // in-place alias is a value of its own: its input died before it was written).
  auto data_of = [&](std::string v) {
    for (auto p = producer.find(v); p != producer.end(); p = producer.find(v)) {
      const Node& n = graph.nodes[p->second];
      auto a = plan.alias.find(v);
      if (a == plan.alias.end() || a->second.kind != AliasKind::kView || !n.HasInput(0)) break;
      v = n.inputs[0];
    }
    return v;
  };
  std::map<std::string, std::string> saved;  // owner -> data value
  for (const Node& n : graph.nodes) {
    const Phase phase = PhaseOrForward(n);
    if (phase != Phase::kBackward && phase != Phase::kRecompute) continue;
    for (const auto& in : n.inputs) {
      auto p = in.empty() ? producer.end() : producer.find(in);
      if (p == producer.end() || PhaseOrForward(graph.nodes[p->second]) != Phase::kForward)
        continue;
      const std::string& owner = owner_of(in);
      // A transient written into a graph output's storage (memory_plan.h) is a buffer of its
      // own until that output is made: it counts like an arena buffer.
      const MemoryClass c = ClassOf(graph, plan, owner);
      auto a = plan.alias.find(in);
      const bool in_output = a != plan.alias.end() && a->second.kind == AliasKind::kInPlace &&
                             (c == MemoryClass::kGradient || c == MemoryClass::kOutput);
      if ((c == MemoryClass::kArena || in_output) && !saved.count(owner))
        saved[owner] = data_of(in);
    }
  }
  return saved;
}

StatusOr<MemoryReport> BuildMemoryReport(const Graph& graph, const MemoryPlan& plan,
                                         const std::string& backend, const std::string& model,
                                         const std::map<std::string, int64_t>& dims) {
  const BackendLayout* layout = plan.Layout(backend);
  if (!layout)
    return Error("memory report: the plan holds no layout for backend '" + backend +
                 "'; plan for it first");
  const size_t steps = graph.nodes.size();
  if (layout->workspace_bytes.size() != steps)
    return Error("memory report: layout '" + backend + "' has workspace for " +
                 std::to_string(layout->workspace_bytes.size()) + " steps, the schedule " +
                 std::to_string(steps) + "; the plan is not for this graph");

  MemoryReport r;
  r.model = model;
  r.dims = dims;
  r.backend = backend;
  r.layout = Summarize(graph, plan, *layout);
  for (const BackendLayout& l : plan.layouts) r.layouts.push_back(Summarize(graph, plan, l));
  r.outside = plan.outside;
  r.flops = CountFlops(graph);

  std::unordered_map<std::string, size_t> producer;
  for (size_t s = 0; s < steps; ++s)
    for (const auto& o : graph.nodes[s].outputs)
      if (!o.empty()) producer[o] = s;
  const std::map<std::string, std::string> saved = SavedBuffers(graph, plan);
  auto scope_of = [&](const std::string& value) -> const std::string& {
    static const std::string kRoot;
    auto p = producer.find(value);
    return p == producer.end() ? kRoot : graph.nodes[p->second].scope;
  };
  std::map<std::string, int64_t> by_module;
  for (const auto& [owner, data] : saved) {
    const int64_t bytes = ValueBytes(graph, owner);
    r.saved_for_backward_bytes += bytes;
    r.saved_for_backward_by_dtype[std::string(DTypeName(graph.FindValue(owner)->dtype))] += bytes;
    by_module[scope_of(data)] += bytes;
  }
  for (const auto& [module, bytes] : by_module)
    r.modules.push_back({module, QualifiedClass(graph, module), bytes});
  std::sort(r.modules.begin(), r.modules.end(), [](const auto& a, const auto& b) {
    if (a.saved_for_backward_bytes != b.saved_for_backward_bytes)
      return a.saved_for_backward_bytes > b.saved_for_backward_bytes;
    return NaturalLess(a.module, b.module);
  });

  // Per-step kinds by difference arrays: buffers and steps both run to the hundred thousands.
  const std::vector<ArenaBuffer> buffers = ArenaBuffers(graph, plan);
  std::vector<int64_t> saved_delta(steps + 1, 0), transient_delta(steps + 1, 0),
      gradient_delta(steps + 1, 0);
  const int64_t peak = layout->peak_step;
  std::unordered_set<std::string> gradients;
  r.gradients_in_arena = plan.gradients_in_arena;
  for (const ArenaBuffer& b : buffers) {
    const bool gradient = ClassOf(graph, plan, b.owner) == MemoryClass::kGradient;
    if (gradient) {
      gradients.insert(b.owner);
      r.arena_gradient_bytes += b.bytes;
      if (b.first <= peak && peak <= b.last) r.arena_gradient_bytes_at_peak += b.bytes;
    }
    auto& delta = gradient ? gradient_delta : saved.count(b.owner) ? saved_delta : transient_delta;
    delta[b.first] += RoundUp(b.bytes);
    delta[b.last + 1] -= RoundUp(b.bytes);
  }
  r.steps.resize(steps);
  int64_t live_saved = 0, live_transient = 0, live_gradient = 0;
  for (size_t s = 0; s < steps; ++s) {
    live_saved += saved_delta[s];
    live_transient += transient_delta[s];
    live_gradient += gradient_delta[s];
    r.steps[s] = {live_saved, live_transient, RoundUp(layout->workspace_bytes[s]),
                  PhaseOrForward(graph.nodes[s]), live_gradient};
  }

  for (const ArenaBuffer& b : buffers) {
    if (b.first > peak || b.last < peak) continue;
    auto p = producer.find(b.owner);
    const std::string phase =
        p == producer.end() ? "" : std::string(PhaseName(PhaseOrForward(graph.nodes[p->second])));
    const Value* v = graph.FindValue(b.owner);
    r.largest_at_peak.push_back({b.owner, b.bytes, scope_of(b.owner), phase,
                                 saved.count(b.owner) != 0, gradients.count(b.owner) != 0,
                                 v ? std::string(DTypeName(v->dtype)) : std::string()});
  }
  std::stable_sort(r.largest_at_peak.begin(), r.largest_at_peak.end(),
                   [](const PeakValue& a, const PeakValue& b) {
                     return a.bytes != b.bytes ? a.bytes > b.bytes : NaturalLess(a.value, b.value);
                   });
  if (r.largest_at_peak.size() > kPeakValues) r.largest_at_peak.resize(kPeakValues);
  return r;
}

double RecomputePercent(const CheckpointReport& c) {
  return c.step_flops > 0 ? 100.0 * double(c.flops_recomputed) / double(c.step_flops) : 0.0;
}

namespace {

using nlohmann::ordered_json;

// The planner's figures for one evaluated selection.
ordered_json EvaluationJson(const CkptEvaluation& e) {
  return {{"total_bytes", e.total_bytes},
          {"arena_bytes", e.arena_bytes},
          {"saved_for_backward_bytes", e.saved_bytes},
          {"flops_recomputed", e.flops_recomputed},
          {"nodes_recomputed", e.nodes_recomputed},
          {"step_flops", e.step_flops},
          {"recompute_percent", RecomputePercent(e)}};
}

// llm-foundry's activation_checkpointing_target dict, as its YAML reads: a string per name, or a
// list of layer indices and strings.
ordered_json TargetDictJson(const CkptConfigText& config) {
  ordered_json dict = ordered_json::object();
  for (const CkptConfigEntry& e : config.entries) {
    if (!e.list) {
      std::string joined;
      for (const CkptLayerItem& item : e.items) joined += (joined.empty() ? "" : ",") + item.text;
      dict[e.name] = joined;
      continue;
    }
    ordered_json items = ordered_json::array();
    for (const CkptLayerItem& item : e.items)
      items.push_back(item.index >= 0 ? ordered_json(item.index) : ordered_json(item.text));
    dict[e.name] = std::move(items);
  }
  return dict;
}

ordered_json BudgetJson(const BudgetChoice& b) {
  ordered_json chosen = {{"activation_checkpointing_target", TargetDictJson(b.config)},
                         {"yaml", b.config.yaml},
                         {"instances", b.chosen.instances}};
  chosen.update(EvaluationJson(b.chosen));
  ordered_json uniform = nullptr;
  if (b.uniform) {
    uniform = {{"target", b.uniform->label}};
    uniform.update(EvaluationJson(*b.uniform));
  }
  return {{"budget_bytes", b.budget_bytes},
          {"device_reserve_bytes", b.reserve_bytes},
          {"chosen", std::move(chosen)},
          {"uniform", std::move(uniform)},
          {"plans_tried", b.plans},
          {"warnings", b.config.warnings},
          {"ckpt_syntax", CkptSyntaxName(b.syntax)},
          {"notes", b.config.notes},
          {"every_block_by_flag", b.config.every_block_by_flag}};
}

}  // namespace

std::string MemoryReportJson(const MemoryReport& r) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["version"] = 1;
  j["model"] = r.model;
  j["dims"] = ordered_json::object();
  for (const auto& [k, v] : r.dims) j["dims"][k] = v;
  j["backend"] = r.backend;
  const LayoutSummary& l = r.layout;
  j["memory"] = {
      {"arena_bytes", l.arena_bytes},
      {"lower_bound_bytes", l.lower_bound_bytes},
      {"ratio",
       l.lower_bound_bytes > 0 ? double(l.arena_bytes) / double(l.lower_bound_bytes) : 0.0},
      {"peak_step", l.peak_step},
      {"peak_node", l.peak_node},
      {"saved_for_backward_bytes", r.saved_for_backward_bytes},
      {"saved_for_backward_by_dtype", r.saved_for_backward_by_dtype},
      {"parameter_bytes", r.outside[MemoryClass::kParameter]},
      {"gradient_bytes", r.outside[MemoryClass::kGradient]},
      {"gradients_in_arena", r.gradients_in_arena},
      {"arena_gradient_bytes", r.arena_gradient_bytes},
      {"arena_gradient_bytes_at_peak", r.arena_gradient_bytes_at_peak},
      {"optimizer_state_bytes", r.outside[MemoryClass::kOptimizerState]},
      {"optimizer", "adamw"},
      {"input_bytes", r.outside[MemoryClass::kInput]},
      {"constant_bytes", r.outside[MemoryClass::kConstant]},
      {"output_bytes", r.outside[MemoryClass::kOutput]},
      {"total_bytes", l.total_bytes},
  };
  j["flops"] = {{"forward", r.flops.forward},
                {"backward", r.flops.backward},
                {"recompute", r.flops.recompute}};
  j["modules"] = ordered_json::array();
  for (const auto& m : r.modules)
    j["modules"].push_back({{"module", m.module},
                            {"class", m.class_name},
                            {"saved_for_backward_bytes", m.saved_for_backward_bytes}});
  j["largest_at_peak"] = ordered_json::array();
  for (const auto& v : r.largest_at_peak)
    j["largest_at_peak"].push_back({{"value", v.value},
                                    {"bytes", v.bytes},
                                    {"module", v.module},
                                    {"phase", v.phase},
                                    {"saved", v.saved},
                                    {"gradient", v.gradient},
                                    {"dtype", v.dtype}});
  j["layouts"] = ordered_json::array();
  for (const auto& s : r.layouts)
    j["layouts"].push_back({{"backend", s.backend},
                            {"arena_bytes", s.arena_bytes},
                            {"lower_bound_bytes", s.lower_bound_bytes},
                            {"peak_step", s.peak_step},
                            {"peak_node", s.peak_node},
                            {"total_bytes", s.total_bytes}});
  if (r.checkpoint) {
    const CheckpointReport& c = *r.checkpoint;
    ordered_json ck;
    ck["targets"] = c.targets;
    ck["instances"] = ordered_json::array();
    for (const auto& i : c.instances)
      ck["instances"].push_back({{"module", i.module},
                                 {"class", i.class_name},
                                 {"target", i.target},
                                 {"values_freed", i.values_freed},
                                 {"bytes_freed", i.bytes_freed},
                                 {"bytes_added", i.bytes_added},
                                 {"nodes_recomputed", i.nodes_recomputed},
                                 {"flops_recomputed", i.flops_recomputed},
                                 {"note", i.note}});
    ck["values_freed"] = c.values_freed;
    ck["bytes_freed"] = c.bytes_freed;
    ck["bytes_added"] = c.bytes_added;
    ck["nodes_recomputed"] = c.nodes_recomputed;
    ck["flops_recomputed"] = c.flops_recomputed;
    ck["saved_before_bytes"] = c.saved_before_bytes;
    ck["saved_after_bytes"] = c.saved_after_bytes;
    ck["step_flops"] = c.step_flops;
    ck["recompute_percent"] = RecomputePercent(c);
    if (c.budget_bytes >= 0) ck["budget_bytes"] = c.budget_bytes;
    std::vector<std::string> notes;
    for (const CkptNesting& n : c.nested) notes.push_back(n.Note());
    notes.insert(notes.end(), c.notes.begin(), c.notes.end());
    ck["notes"] = notes;
    j["checkpoint"] = std::move(ck);
  }
  if (r.budget) j["budget"] = BudgetJson(*r.budget);
  return j.dump(2) + "\n";
}

namespace {

// "125.3 MiB (131389440 B)": readable and exact.
std::string Bytes(int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  return HumanBytes(bytes) + " (" + std::to_string(bytes) + " B)";
}

// "3.00 GFLOP": three significant-ish digits in the unit that keeps the number under 1000.
std::string Flops(int64_t flops) {
  if (flops < 1000) return std::to_string(flops) + " FLOP";
  const char* units[] = {"kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
  double v = double(flops) / 1e3;
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string ModuleName(const std::string& scope) { return scope.empty() ? "(root)" : scope; }

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    out.push_back(path.substr(start, dot == std::string::npos ? dot : dot - start));
    if (dot == std::string::npos) return out;
    start = dot + 1;
  }
}

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() < 18 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// The one segment where two module paths differ when both hold a layer number there; -1 when
// they differ elsewhere or more.
int LayerSegment(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  if (a.size() != b.size()) return -1;
  int at = -1;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k] == b[k]) continue;
    if (at >= 0 || !AllDigits(a[k]) || !AllDigits(b[k])) return -1;
    at = static_cast<int>(k);
  }
  return at;
}

// "0..3,6,8..9": the numbers in order, runs of consecutive ones collapsed.
std::string Ranges(const std::vector<int64_t>& numbers) {
  std::string out;
  for (size_t i = 0; i < numbers.size();) {
    size_t j = i;
    while (j + 1 < numbers.size() && numbers[j + 1] == numbers[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(numbers[i]);
    if (j > i) out += ".." + std::to_string(numbers[j]);
    i = j + 1;
  }
  return out;
}

// Instances whose rows are identical but for the layer number print as one row
// ("transformer.blocks.{0..47}.attn", 48): a 48-layer model with two targets stays 2 rows, though
// the selection interleaves them layer by layer. Groups list in the order of their first instance.
struct InstanceGroup {
  std::string modules;
  const CheckpointInstanceReport* row = nullptr;  // the first; the others have the same numbers
  int64_t count = 0;
};

std::vector<InstanceGroup> GroupInstances(const std::vector<CheckpointInstanceReport>& rows) {
  auto same = [](const CheckpointInstanceReport& a, const CheckpointInstanceReport& b) {
    return a.class_name == b.class_name && a.target == b.target &&
           a.values_freed == b.values_freed && a.bytes_freed == b.bytes_freed &&
           a.bytes_added == b.bytes_added && a.nodes_recomputed == b.nodes_recomputed &&
           a.flops_recomputed == b.flops_recomputed && a.note == b.note;
  };
  struct Building {
    std::vector<std::string> segments;  // the first instance's path
    const CheckpointInstanceReport* row;
    int at = -1;  // the segment holding the layer, once a second instance joined
    std::set<int64_t> layers;
  };
  std::vector<Building> building;
  for (const CheckpointInstanceReport& row : rows) {
    const std::vector<std::string> segs = Segments(row.module);
    bool joined = false;
    for (Building& g : building) {
      if (!same(*g.row, row)) continue;
      const int k = LayerSegment(g.segments, segs);
      if (k < 0 || (g.at >= 0 && k != g.at)) continue;
      const int64_t layer = std::stoll(segs[k]);
      if (g.layers.count(layer)) continue;
      if (g.at < 0) g.layers.insert(std::stoll(g.segments[k]));
      g.at = k;
      g.layers.insert(layer);
      joined = true;
      break;
    }
    if (!joined) building.push_back({segs, &row, -1, {}});
  }
  std::vector<InstanceGroup> groups;
  for (const Building& b : building) {
    InstanceGroup g{b.row->module, b.row, 1};
    if (b.at >= 0) {
      std::vector<std::string> segs = b.segments;
      segs[b.at] = "{" + Ranges({b.layers.begin(), b.layers.end()}) + "}";
      g.modules.clear();
      for (size_t k = 0; k < segs.size(); ++k) g.modules += (k ? "." : "") + segs[k];
      g.count = static_cast<int64_t>(b.layers.size());
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

// Left-aligned text columns, right-aligned number columns, two spaces apart.
std::string Table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right,
                  const std::string& indent) {
  std::vector<size_t> width(right.size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      line += (c ? "  " : "") + (right[c] ? pad + row[c] : row[c] + pad);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  return out.str();
}

// `i.module` with its block's index written as `layers` ("transformer.blocks.{0..7}.attn");
// nullopt when the module is not P.N or inside it (a selection made by hand).
std::optional<std::string> AtLayers(const CkptInstance& i, const std::string& layers) {
  if (i.layer < 0) return std::nullopt;
  const std::string list = i.block_list.empty() ? "" : i.block_list + ".";
  const std::string block = list + std::to_string(i.layer);
  if (i.module.compare(0, block.size(), block) != 0 ||
      (i.module.size() > block.size() && i.module[block.size()] != '.'))
    return std::nullopt;
  return list + layers + i.module.substr(block.size());
}

// Nesting notes that differ only in the layer ("transformer.blocks.3.attn (...) is inside
// transformer.blocks.3 (...)") print once, the layers as "{0..7}": a note per layer would bury the
// table on a 48-layer model. Groups list in the order of their first note.
std::vector<std::string> GroupNotes(const std::vector<CkptNesting>& nested) {
  struct Group {
    const CkptNesting* first;
    std::vector<int64_t> layers;  // empty: a note that groups with none
  };
  std::vector<Group> groups;
  std::map<std::tuple<std::string, std::string, std::string, std::string>, size_t> by_key;
  for (const CkptNesting& n : nested) {
    const auto inner = AtLayers(n.inner, "{}"), outer = AtLayers(n.outer, "{}");
    if (!inner || !outer || n.inner.layer != n.outer.layer) {
      groups.push_back({&n, {}});
      continue;
    }
    auto [it, added] = by_key.emplace(
        std::make_tuple(*inner, n.inner.target, *outer, n.outer.target), groups.size());
    if (added) groups.push_back({&n, {}});
    groups[it->second].layers.push_back(n.inner.layer);
  }
  std::vector<std::string> out;
  for (Group& g : groups) {
    if (g.layers.size() < 2) {
      out.push_back(g.first->Note());
      continue;
    }
    std::sort(g.layers.begin(), g.layers.end());
    const std::string fill = "{" + Ranges(g.layers) + "}";
    out.push_back(NestingNote(*AtLayers(g.first->inner, fill), g.first->inner.target,
                              *AtLayers(g.first->outer, fill), g.first->outer.target));
  }
  return out;
}

std::string FormatCheckpoint(const CheckpointReport& c) {
  std::ostringstream out;
  if (c.instances.empty() && c.nested.empty() && c.notes.empty()) return "checkpointing: none\n";
  out << "checkpointing: " << c.instances.size() << " instance"
      << (c.instances.size() == 1 ? "" : "s") << " of";
  for (size_t i = 0; i < c.targets.size(); ++i) out << (i ? ", " : " ") << c.targets[i];
  out << "\n";
  std::vector<std::vector<std::string>> rows = {{"module", "n", "class", "target", "values freed",
                                                 "bytes freed", "bytes added", "nodes",
                                                 "recompute"}};
  const std::vector<InstanceGroup> groups = GroupInstances(c.instances);
  for (const InstanceGroup& g : groups) {
    const CheckpointInstanceReport& i = *g.row;
    rows.push_back({g.modules, std::to_string(g.count),
                    i.class_name.empty() ? "?" : BareClassName(i.class_name), i.target,
                    std::to_string(i.values_freed), HumanBytes(i.bytes_freed),
                    HumanBytes(i.bytes_added), std::to_string(i.nodes_recomputed),
                    Flops(i.flops_recomputed)});
  }
  rows.push_back({"total", std::to_string(c.instances.size()), "", "",
                  std::to_string(c.values_freed), HumanBytes(c.bytes_freed),
                  HumanBytes(c.bytes_added), std::to_string(c.nodes_recomputed),
                  Flops(c.flops_recomputed)});
  out << Table(rows, {false, true, false, false, true, true, true, true, true}, "  ");
  for (const InstanceGroup& g : groups)
    if (g.count > 1) {
      out << "  (a row with n > 1 is n instances with these numbers each)\n";
      break;
    }
  char percent[32];
  std::snprintf(percent, sizeof percent, "%.2f", RecomputePercent(c));
  out << "  saved for backward " << HumanBytes(c.saved_before_bytes) << " -> "
      << HumanBytes(c.saved_after_bytes) << "  (" << c.saved_before_bytes << " - " << c.bytes_freed
      << " freed + " << c.bytes_added << " added = " << c.saved_after_bytes << " B)\n"
      << "  recompute          " << Flops(c.flops_recomputed) << ", " << percent
      << " % of the step's " << Flops(c.step_flops) << "\n";
  for (const auto& note : GroupNotes(c.nested)) out << "  note: " << note << "\n";
  for (const auto& note : c.notes) out << "  note: " << note << "\n";
  for (const InstanceGroup& g : groups)
    if (!g.row->note.empty()) out << "  note: " << g.modules << ": " << g.row->note << "\n";
  return out.str();
}

}  // namespace

namespace {

// "  (bf16 X, f32 Y, i64 Z)" when the saved bytes have more than one floating element type (a
// mixed-precision plan); "" otherwise.
std::string SavedByDtype(const MemoryReport& r) {
  int floats = 0;
  for (const auto& [dtype, bytes] : r.saved_for_backward_by_dtype)
    floats += IsFloat(DTypeFromName(dtype));
  if (floats < 2) return "";
  std::string out = "  (";
  for (const auto& [dtype, bytes] : r.saved_for_backward_by_dtype)
    out += (out.size() > 3 ? ", " : "") + dtype + " " + HumanBytes(bytes);
  return out + ")";
}

}  // namespace

std::string FormatMemoryReport(const MemoryReport& r) {
  std::ostringstream out;
  const LayoutSummary& l = r.layout;
  out << "memory report (" << r.backend << ")";
  if (!r.dims.empty()) {
    out << ",";
    for (const auto& [k, v] : r.dims) out << " " << k << "=" << v;
  }
  out << "\n";
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.4f",
                l.lower_bound_bytes > 0 ? double(l.arena_bytes) / double(l.lower_bound_bytes) : 0);
  out << "  arena              " << Bytes(l.arena_bytes) << "\n"
      << "  lower bound        " << Bytes(l.lower_bound_bytes) << "  (arena / bound " << ratio
      << ")\n"
      << "  peak               step " << l.peak_step << " of " << r.steps.size() << ", node '"
      << l.peak_node << "'\n"
      << "  saved for backward " << Bytes(r.saved_for_backward_bytes) << SavedByDtype(r) << "\n"
      << "  parameters         " << Bytes(r.outside[MemoryClass::kParameter]) << "\n"
      << "  gradients          "
      << (r.gradients_in_arena ? "in the arena, " + Bytes(r.arena_gradient_bytes_at_peak) + " of " +
                                     Bytes(r.arena_gradient_bytes) + " live at the peak"
                               : Bytes(r.outside[MemoryClass::kGradient]))
      << "\n"
      << "  optimizer state    " << Bytes(r.outside[MemoryClass::kOptimizerState]) << "  (AdamW)\n"
      << "  inputs             " << Bytes(r.outside[MemoryClass::kInput]) << "\n"
      << "  constants          " << Bytes(r.outside[MemoryClass::kConstant]) << "\n"
      << "  outputs            " << Bytes(r.outside[MemoryClass::kOutput]) << "\n"
      << "  total              " << Bytes(l.total_bytes) << "\n"
      << "  flops              forward " << Flops(r.flops.forward) << ", backward "
      << Flops(r.flops.backward) << ", recompute " << Flops(r.flops.recompute) << "\n";
  for (const auto& s : r.layouts)
    if (s.backend != r.backend)
      out << "  layout " << s.backend << ": arena " << Bytes(s.arena_bytes) << ", lower bound "
          << Bytes(s.lower_bound_bytes) << ", total " << Bytes(s.total_bytes) << "\n";

  out << "largest values live at the peak (step " << l.peak_step << "):\n";
  for (const auto& v : r.largest_at_peak)
    out << "  " << std::setw(10) << HumanBytes(v.bytes) << "  " << std::left << std::setw(9)
        << (v.saved      ? "saved"
            : v.gradient ? "gradient"
                         : "transient")
        << "  " << std::setw(9) << v.phase << "  " << std::setw(4) << v.dtype << std::right << "  "
        << ModuleName(v.module) << "  " << v.value << "\n";
  if (l.peak_step >= 0 && l.peak_step < static_cast<int64_t>(r.steps.size()) &&
      r.steps[l.peak_step].workspace > 0)
    out << "  " << std::setw(10) << HumanBytes(r.steps[l.peak_step].workspace) << "  workspace of '"
        << l.peak_node << "'\n";

  constexpr size_t kModuleRows = 10;
  out << "saved for backward by module (" << r.modules.size() << " modules):\n";
  for (size_t i = 0; i < r.modules.size() && i < kModuleRows; ++i) {
    const auto& m = r.modules[i];
    out << "  " << std::setw(10) << HumanBytes(m.saved_for_backward_bytes) << "  "
        << ModuleName(m.module);
    if (!m.class_name.empty()) out << "  " << BareClassName(m.class_name);
    out << "\n";
  }
  if (r.modules.size() > kModuleRows) {
    int64_t rest = 0;
    for (size_t i = kModuleRows; i < r.modules.size(); ++i)
      rest += r.modules[i].saved_for_backward_bytes;
    out << "  " << std::setw(10) << HumanBytes(rest) << "  (" << r.modules.size() - kModuleRows
        << " more modules)\n";
  }
  if (r.checkpoint) out << FormatCheckpoint(*r.checkpoint);
  return out.str();
}

}  // namespace foundry
