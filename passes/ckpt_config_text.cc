// SelectionAsConfig (ckpt_budget.h): a set of module instances said as llm-foundry's
// activation_checkpointing_target dict, {name: layers, ...}.
//
// Names. Each instance gets the first name, in this order, that selects it and, in its layer,
// nothing that is not chosen too (so the union of the targets is exactly the instances, with no
// nested "outer wins" drops):
//   1. mptblock, grouped_query_attention, mptmlp: the keys upstream documents for the block, the
//      attentions (MHA and MQA subclass GQA) and the FFNs (MPTGLU subclasses MPTMLP);
//   2. the module's other registry keys, its own class's first (low_precision_layernorm before
//      layernorm);
//   3. `block` for a block;
//   4. its child name, for a direct child of a block (`norm_1` when `layernorm` would also take
//      norm_2);
//   5. the module-path glob `P.*.REST`, which selects exactly that module in each layer.
// What a name selects is asked of SelectCkptTargets itself, so the output reads back by
// construction; the result is still read back once and compared before it is returned.
//
// Layers. Upstream's dict form has no "every layer" value: a dict value goes through
// get_target_block_list, where -1 is range(-1), i.e. nothing (the -1 that means every block is
// only the list and string forms'). So every layer is `first-N`, which is just the general rule:
// runs of consecutive layers become first-n (from 0), last-k (to the end), range-i-j (half-open)
// or a bare index (a run of one); several items are a quoted comma string, or a YAML list when a
// bare index is among them (upstream's comma string takes no bare index; its list does; a bare
// int value would mean "the first n"). A name whose layer set can grow to a shorter spec by
// taking layers where everything it selects is chosen anyway (covered twice) takes them.
// With several lists of blocks of different lengths, last-k and bare indices (which depend on
// the list's length, or are errors past its end) are replaced by range-i-j.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "base/quote.h"
#include "compiler/module_tree.h"
#include "passes/ckpt_budget.h"

namespace foundry {
namespace {

std::string Join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

bool IsFfnKey(const std::string& key) {
  for (const char* k : {"mptmlp", "mptglu", "te_ln_mlp", "torch_dmoe", "mb_moe", "mb_dmoe"})
    if (key == k) return true;
  return false;
}

// A YAML plain scalar when it is safe as one inside a flow mapping, else single-quoted.
std::string YamlScalar(const std::string& s) {
  bool plain = !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_');
  for (char c : s)
    plain =
        plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-');
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A layer set as llm-foundry target_blocks: `text` for CkptTarget::layers (--ckpt's form) and
// `yaml` for the dict value.
struct LayerSpec {
  std::string text;
  std::string yaml;
  std::vector<CkptLayerItem> items;
  bool list = false;
};
LayerSpec SpecOf(const std::set<int64_t>& layers, int64_t num_layers) {
  std::vector<std::string> items;
  std::vector<CkptLayerItem> typed;
  bool has_index = false;
  for (auto it = layers.begin(); it != layers.end();) {
    const int64_t a = *it;
    int64_t b = a;
    for (++it; it != layers.end() && *it == b + 1; ++it) b = *it;
    if (a == 0) {
      typed.push_back({"first-" + std::to_string(b + 1), -1});
    } else if (num_layers > 0 && b == num_layers - 1) {
      typed.push_back({"last-" + std::to_string(num_layers - a), -1});
    } else if (num_layers > 0 && a == b) {
      typed.push_back({std::to_string(a), a});
      has_index = true;
    } else {
      typed.push_back({"range-" + std::to_string(a) + "-" + std::to_string(b + 1), -1});
    }
    items.push_back(typed.back().text);
  }
  // A lone bare index would read as "the first n": bare indices go in a list.
  LayerSpec spec;
  spec.items = std::move(typed);
  spec.list = has_index;
  spec.text = has_index ? "[" + Join(items, ",") + "]" : Join(items, ",");
  if (has_index)
    spec.yaml = "[" + Join(items, ", ") + "]";
  else
    spec.yaml = items.size() == 1 ? items[0] : "'" + spec.text + "'";
  return spec;
}

// Every layer of any name.
std::set<int64_t> AllLayers(const std::map<std::string, std::set<int64_t>>& layers) {
  std::set<int64_t> out;
  for (const auto& [name, ls] : layers) out.insert(ls.begin(), ls.end());
  return out;
}

// "0..2, 5": runs of consecutive layers.
std::string RunsText(const std::set<int64_t>& layers) {
  std::vector<std::string> runs;
  for (auto it = layers.begin(); it != layers.end();) {
    const int64_t a = *it;
    int64_t b = a;
    for (++it; it != layers.end() && *it == b + 1; ++it) b = *it;
    runs.push_back(a == b ? std::to_string(a) : std::to_string(a) + ".." + std::to_string(b));
  }
  return Join(runs, ", ");
}

// What one name selects in the model, per layer index.
struct NameReach {
  bool usable = false;
  std::map<int64_t, std::set<std::string>> by_layer;
  std::set<std::string> lists;  // the block lists of what it selects
};

// The note every kLlmFoundry answer carries.
constexpr const char* kUpstreamNote =
    "held to what upstream llm-foundry accepts (--ckpt-syntax llm-foundry): the dict form, one "
    "name per block (act_ckpt.py's check_mapping_blocks_overlap), names it resolves to a class "
    "(mptblock, attention and norm keys; no FFN keys); --ckpt-syntax foundry may find cheaper "
    "selections that only foundry reads";
constexpr const char* kHfNote =
    "this model's blocks are not llm-foundry's MPTBlock: llm-foundry checkpoints a Hugging "
    "Face model's decoder blocks all or none (hf_fsdp.py's activation_checkpointing_fn) and "
    "reads no model.activation_checkpointing_target for it, so the answer is every block or "
    "nothing; --ckpt-syntax foundry may find cheaper selections that only foundry reads";

}  // namespace

bool IsUpstreamClassKey(const std::string& name) {
  for (const char* k : {"mptblock", "grouped_query_attention", "multihead_attention",
                        "multiquery_attention", "norm_attn_norm", "layernorm", "rmsnorm",
                        "low_precision_layernorm", "low_precision_rmsnorm", "triton_rmsnorm"})
    if (name == k) return true;
  return false;
}

bool IsMptModel(const Graph& graph) {
  bool any = false;
  for (const ModuleInfo& m : ListModules(graph)) {
    if (!m.is_block) continue;
    if (std::find(m.registry_keys.begin(), m.registry_keys.end(), "mptblock") ==
        m.registry_keys.end())
      return false;
    any = true;
  }
  return any;
}

std::vector<UpstreamUnit> UpstreamUnits(const Graph& graph) {
  std::vector<UpstreamUnit> out;
  if (!IsMptModel(graph)) return out;
  const std::vector<ModuleInfo> modules = ListModules(graph);
  std::map<std::string, std::string> block_of;  // module path -> its block's path
  int64_t layers = 0;
  for (const ModuleInfo& m : modules)
    if (m.block_index >= 0) {
      block_of[m.path] = m.block_list + "." + std::to_string(m.block_index);
      layers = std::max(layers, m.block_index + 1);
    }
  // Preference: the attention (grouped_query_attention first: MHA and MQA subclass it), the
  // fused norm-attention-norm, the norms (their own class's key before torch's LayerNorm).
  for (const char* key : {"grouped_query_attention", "multihead_attention", "multiquery_attention",
                          "norm_attn_norm", "low_precision_layernorm", "low_precision_rmsnorm",
                          "triton_rmsnorm", "rmsnorm", "layernorm"}) {
    auto sel = SelectCkptTargets(graph, {CkptTarget{key, "", "UpstreamUnits"}});
    if (!sel.ok() || !sel->nested.empty() || sel->instances.empty()) continue;
    std::map<int64_t, std::set<std::string>> rel;  // layer -> modules relative to the block
    bool whole_block = false;
    for (const CkptInstance& i : sel->instances) {
      const std::string& block = block_of.at(i.module);
      if (i.module == block)
        whole_block = true;
      else
        rel[i.layer].insert(i.module.substr(block.size() + 1));
    }
    if (whole_block || static_cast<int64_t>(rel.size()) != layers) continue;
    bool alike = true;
    for (const auto& [layer, mods] : rel) alike = alike && mods == rel.begin()->second;
    if (!alike) continue;
    std::vector<std::string> children(rel.begin()->second.begin(), rel.begin()->second.end());
    bool seen = false;
    for (const UpstreamUnit& u : out) seen = seen || u.children == children;
    if (!seen) out.push_back({key, std::move(children)});
  }
  return out;
}

StatusOr<CkptConfigText> SelectionAsConfig(const Graph& graph,
                                           const std::vector<std::string>& instances,
                                           CkptSyntax syntax) {
  CkptConfigText out;
  if (instances.empty()) return out;  // llm-foundry says "nothing" with its flag, not a target
  const bool upstream = syntax == CkptSyntax::kLlmFoundry;
  const std::string refuse =
      "; upstream llm-foundry cannot say it (--ckpt-syntax foundry writes "
      "it in foundry's richer syntax)";
  if (upstream && !IsMptModel(graph)) {
    std::vector<std::string> blocks;
    for (const ModuleInfo& m : ListModules(graph))
      if (m.is_block) blocks.push_back(m.path);
    std::vector<std::string> sorted = instances;
    std::sort(sorted.begin(), sorted.end(), ModulePathLess);
    if (sorted != blocks)
      return Error("checkpoint selection of " + std::to_string(instances.size()) +
                   " instances is not every block of this non-MPT model" + refuse);
    out.every_block_by_flag = true;
    out.targets.push_back({kBlockKey, "", "SelectionAsConfig"});
    out.notes.push_back(kHfNote);
    return out;
  }

  const std::vector<ModuleInfo> modules = ListModules(graph);
  std::map<std::string, const ModuleInfo*> by_path;
  std::map<std::string, int64_t> list_layers;  // block list -> number of layers
  for (const auto& m : modules) {
    by_path[m.path] = &m;
    if (m.block_index >= 0)
      list_layers[m.block_list] = std::max(list_layers[m.block_list], m.block_index + 1);
  }

  // The chosen instances per layer index, checked.
  std::map<int64_t, std::set<std::string>> chosen;
  std::set<std::string> all;
  for (const auto& path : instances) {
    auto it = by_path.find(path);
    if (it == by_path.end())
      return Error("checkpoint selection: '" + path + "' is not a module of this model");
    if (it->second->block_index < 0)
      return Error("checkpoint selection: '" + path +
                   "' is not inside a block; only modules inside the blocks can be checkpointed");
    if (!all.insert(path).second)
      return Error("checkpoint selection: '" + path + "' is listed twice");
    chosen[it->second->block_index].insert(path);
  }
  for (const auto& a : all)
    for (const auto& b : all)
      if (a.size() > b.size() && a.compare(0, b.size() + 1, b + ".") == 0)
        return Error("checkpoint selection: '" + a + "' is inside '" + b +
                     "', also selected; list the outer module only");

  std::map<std::string, NameReach> reach;
  auto reach_of = [&](const std::string& name) -> const NameReach& {
    auto it = reach.find(name);
    if (it != reach.end()) return it->second;
    NameReach r;
    auto sel = SelectCkptTargets(graph, {CkptTarget{name, "", "SelectionAsConfig"}});
    if (sel.ok() && sel->nested.empty()) {
      r.usable = true;
      for (const auto& inst : sel->instances) {
        r.by_layer[inst.layer].insert(inst.module);
        r.lists.insert(by_path.at(inst.module)->block_list);
      }
    }
    return reach.emplace(name, std::move(r)).first->second;
  };
  // `name` may stand for the chosen instances of `layer`: what it selects there is all chosen.
  auto fits = [&](const std::string& name, int64_t layer) {
    const NameReach& r = reach_of(name);
    auto it = r.by_layer.find(layer);
    if (!r.usable || it == r.by_layer.end()) return false;
    const std::set<std::string>& want = chosen[layer];
    return std::includes(want.begin(), want.end(), it->second.begin(), it->second.end());
  };

  // 1. Each instance's name, in module-tree order.
  std::vector<std::string> sorted(instances.begin(), instances.end());
  std::sort(sorted.begin(), sorted.end(), ModulePathLess);
  std::vector<std::string> names;                   // in order of first use
  std::map<std::string, std::set<int64_t>> layers;  // name -> layers it is written for
  for (const auto& path : sorted) {
    const ModuleInfo& m = *by_path.at(path);
    std::vector<std::string> candidates;
    for (const char* k : {"mptblock", "grouped_query_attention", "mptmlp"})
      if (std::count(m.registry_keys.begin(), m.registry_keys.end(), k)) candidates.push_back(k);
    for (const auto& k : m.registry_keys)
      if (IsCkptRegistryKey(k)) candidates.push_back(k);
    if (m.is_block) candidates.push_back(kBlockKey);
    const std::string block_path = m.block_list + "." + std::to_string(m.block_index);
    const std::string rest = m.is_block ? "" : path.substr(block_path.size() + 1);
    if (!m.is_block && rest.find('.') == std::string::npos) candidates.push_back(rest);
    candidates.push_back(m.block_list + ".*" + (m.is_block ? "" : "." + rest));
    std::vector<std::string> named;  // every candidate once, for the error below
    for (const auto& c : candidates)
      if (std::find(named.begin(), named.end(), c) == named.end()) named.push_back(c);
    if (upstream)
      candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                      [](const std::string& c) { return !IsUpstreamClassKey(c); }),
                       candidates.end());
    std::string picked;
    for (const auto& c : candidates) {
      const NameReach& r = reach_of(c);
      if (fits(c, m.block_index) && r.by_layer.at(m.block_index).count(path)) {
        picked = c;
        break;
      }
    }
    if (picked.empty() && upstream)
      return Error(
          "checkpoint selection: no name upstream llm-foundry resolves to a class selects '" +
          path + "' alone (foundry's names for it: " + Join(named, ", ") + ")" + refuse);
    if (picked.empty())
      return Error("checkpoint selection: no name selects '" + path + "' alone (tried " +
                   Join(candidates, ", ") + ")");
    if (!layers.count(picked)) names.push_back(picked);
    layers[picked].insert(m.block_index);
  }

  // The layer count a name's specs are relative to; -1 when its lists differ in length.
  auto count_of = [&](const std::string& name) {
    std::set<int64_t> counts;
    for (const auto& list : reach_of(name).lists) counts.insert(list_layers[list]);
    return counts.size() == 1 ? *counts.begin() : int64_t{-1};
  };

  // 2. Grow a name's layers where that shortens its spec: every layer it fits is harmless.
  for (const auto& name : names) {
    std::set<int64_t> grown = layers[name];
    std::set<int64_t> others;  // layers another name is written for
    for (const auto& other : names)
      if (other != name) others.insert(layers[other].begin(), layers[other].end());
    for (const auto& [layer, mods] : reach_of(name).by_layer)
      if (fits(name, layer) && !(upstream && others.count(layer))) grown.insert(layer);
    const int64_t n = count_of(name);
    if (SpecOf(grown, n).yaml.size() < SpecOf(layers[name], n).yaml.size()) layers[name] = grown;
  }

  // 3. Drop a name whose instances the others cover too.
  auto covered = [&](const std::string& name, const std::vector<std::string>& others) {
    for (int64_t layer : layers[name])
      for (const auto& mod : reach_of(name).by_layer.at(layer)) {
        bool hit = false;
        for (const auto& o : others)
          hit = hit || (layers[o].count(layer) && reach_of(o).by_layer.at(layer).count(mod));
        if (!hit) return false;
      }
    return true;
  };
  for (size_t i = names.size(); i-- > 0;) {
    std::vector<std::string> others;
    for (size_t j = 0; j < names.size(); ++j)
      if (j != i) others.push_back(names[j]);
    if (covered(names[i], others)) names.erase(names.begin() + i);
  }
  // Upstream's example order: by first layer, then by first use.
  std::stable_sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    return *layers[a].begin() < *layers[b].begin();
  });

  std::vector<std::string> entries;
  for (const auto& name : names) {
    const LayerSpec spec = SpecOf(layers[name], count_of(name));
    entries.push_back(YamlScalar(name) + ": " + spec.yaml);
    out.entries.push_back({name, spec.items, spec.list});
    out.targets.push_back({name, spec.text, "SelectionAsConfig"});
  }
  out.yaml = "{" + Join(entries, ", ") + "}";

  // Where upstream llm-foundry would stop.
  for (const auto& name : names) {
    if (IsFfnKey(name)) {
      out.warnings.push_back("upstream llm-foundry rejects '" + name +
                             "': FFN keys raise a TypeError there (foundry reads them)");
    } else if (name == kBlockKey) {
      out.warnings.push_back(
          "upstream llm-foundry rejects 'block': foundry's name for every block (upstream "
          "knows mptblock only)");
    } else if (name.find('*') != std::string::npos) {
      out.warnings.push_back("upstream llm-foundry rejects '" + name +
                             "': a module-path glob (foundry only; upstream takes registry "
                             "keys)");
    } else if (!IsCkptRegistryKey(name)) {
      out.warnings.push_back("upstream llm-foundry rejects '" + name +
                             "': a child name of the blocks (foundry only; upstream takes "
                             "registry keys)");
    }
  }
  std::set<int64_t> shared;        // layers written under two names or more
  std::set<std::string> crowding;  // those names
  for (int64_t layer : AllLayers(layers)) {
    std::vector<std::string> on;
    for (const auto& name : names)
      if (layers[name].count(layer)) on.push_back(name);
    if (on.size() < 2) continue;
    shared.insert(layer);
    crowding.insert(on.begin(), on.end());
  }
  if (!shared.empty()) {
    std::vector<std::string> ns;
    for (const auto& name : names)
      if (crowding.count(name)) ns.push_back(name);
    out.warnings.push_back("upstream llm-foundry rejects several names on one block: " +
                           Join(ns, ", ") + " share layer" + (shared.size() > 1 ? "s " : " ") +
                           RunsText(shared) + " (its overlap check allows one name per block)");
  }

  if (upstream) {
    if (!out.warnings.empty())
      return Error("checkpoint selection " + out.yaml + ": " + out.warnings.front() + refuse);
    out.notes.push_back(kUpstreamNote);
  }

  // Read back, as --ckpt-config will.
  auto sel = SelectCkptTargets(graph, out.targets);
  if (!sel.ok()) return Error("checkpoint config " + out.yaml + ": " + sel.status().message());
  std::set<std::string> got;
  for (const auto& inst : sel->instances) got.insert(inst.module);
  if (got != all || !sel->nested.empty())
    return Error("checkpoint config " + out.yaml + " does not read back to the " +
                 std::to_string(all.size()) + " selected instances (it selects " +
                 std::to_string(got.size()) + ")");
  return out;
}

std::string CkptConfigFile(const std::string& comment, const CkptConfigText& config) {
  // The comment quotes the command line (the model path, --memory-budget's text): a newline in
  // it would end the comment and start YAML of the user's choosing.
  std::string out = "# " + EscapeName(comment) + "\n";
  for (const auto& w : config.warnings) out += "# warning: " + EscapeName(w) + "\n";
  for (const auto& n : config.notes) out += "# note: " + EscapeName(n) + "\n";
  if (config.every_block_by_flag) return out + "fsdp_config:\n  activation_checkpointing: true\n";
  if (config.empty()) return out + "fsdp_config:\n  activation_checkpointing: false\n";
  return out + "model:\n  activation_checkpointing_target: " + config.yaml +
         "\nfsdp_config:\n  activation_checkpointing: true\n";
}

}  // namespace foundry
