#include "compiler/module_tree.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <unordered_map>

#include "base/bytes.h"

namespace foundry {

namespace {

// Upstream (mosaicml/llm-foundry, llmfoundry/models/utils/act_ckpt.py get_act_ckpt_module, and
// the registries it reads: layers_registry.py's attention_classes, ffns, ffns_with_norm,
// ffns_with_megablocks, norms; blocks.py's MPTBlock and FusedNormAttentionNorm).
const std::vector<CkptRegistryEntry> kRegistry = {
    {"mptblock", "MPTBlock", "llmfoundry.models.layers.blocks", false},
    {"norm_attn_norm", "FusedNormAttentionNorm", "llmfoundry.models.layers.blocks", false},
    {"grouped_query_attention", "GroupedQueryAttention", "llmfoundry.models.layers.attention",
     false},
    {"multihead_attention", "MultiheadAttention", "llmfoundry.models.layers.attention", false},
    {"multiquery_attention", "MultiQueryAttention", "llmfoundry.models.layers.attention", false},
    {"mptmlp", "MPTMLP", "llmfoundry.models.layers.ffn", false},
    {"mptglu", "MPTGLU", "llmfoundry.models.layers.ffn", false},
    {"torch_dmoe", "dMoE", "llmfoundry.models.layers.dmoe", false},
    {"te_ln_mlp", "LayerNormMLP", "transformer_engine.pytorch", false},
    {"mb_moe", "MoE", "megablocks.layers.moe", true},
    {"mb_dmoe", "dMoE", "megablocks.layers.dmoe", true},
    {"layernorm", "LayerNorm", "torch.nn", false},
    {"low_precision_layernorm", "LPLayerNorm", "llmfoundry.models.layers.norm", false},
    {"rmsnorm", "RMSNorm", "llmfoundry.models.layers.norm", false},
    {"low_precision_rmsnorm", "LPRMSNorm", "llmfoundry.models.layers.norm", false},
    {"triton_rmsnorm", "TritonRMSNorm", "llmfoundry.models.layers.norm", false},
};

// Whether `entry` selects a class written `qualified` (or bare): a package_only entry takes only
// its package's class; another entry with the same bare name takes every other package's.
bool RegistrySelects(const CkptRegistryEntry& entry, const std::string& qualified) {
  if (BareClassName(qualified) != entry.bare_class) return false;
  auto in_package = [&](const CkptRegistryEntry& e) {
    return qualified.compare(0, std::string(e.package).size() + 1, std::string(e.package) + ".") ==
           0;
  };
  if (entry.package_only) return in_package(entry);
  for (const auto& other : kRegistry)
    if (other.package_only && other.bare_class == entry.bare_class && in_package(other))
      return false;
  return true;
}

// Base classes llm-foundry defines, for exports that name a class without its bases (the dynamo
// exporter's class_hierarchy, ONNX functions): the keys still match as isinstance would.
struct KnownBase {
  const char* bare_class;
  const char* base;
};
constexpr KnownBase kKnownBases[] = {
    {"MultiheadAttention", "GroupedQueryAttention"},
    {"MultiQueryAttention", "GroupedQueryAttention"},
    {"LPLayerNorm", "LayerNorm"},
    {"LPRMSNorm", "RMSNorm"},
    {"MPTGLU", "MPTMLP"},
};

std::string LowerAscii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  if (path.empty()) return out;
  size_t start = 0;
  for (;;) {
    size_t dot = path.find('.', start);
    out.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return out;
    start = dot + 1;
  }
}

bool IsNumber(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

// Natural order of one path segment: numbers by value, before names.
bool SegmentLess(const std::string& a, const std::string& b) {
  bool na = IsNumber(a), nb = IsNumber(b);
  if (na && nb) {
    std::string ta = a.substr(std::min(a.find_first_not_of('0'), a.size() - 1));
    std::string tb = b.substr(std::min(b.find_first_not_of('0'), b.size() - 1));
    if (ta.size() != tb.size()) return ta.size() < tb.size();
    if (ta != tb) return ta < tb;
    return a < b;
  }
  if (na != nb) return na;
  return a < b;
}

bool PathLess(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), SegmentLess);
}

bool IsInside(const std::string& name, const std::string& module) {
  if (module.empty()) return true;
  return name.size() > module.size() && name.compare(0, module.size(), module) == 0 &&
         name[module.size()] == '.';
}

bool IsRegistryKey(const std::string& key) { return IsCkptRegistryKey(key); }

// Where a module sits in the model's blocks: P, N and whether it is the block itself.
struct BlockPlace {
  std::string list;
  int64_t index = -1;
  bool is_block = false;
};

// A layer index: digits only, small enough for int64 (a fuzzed path may hold any digit string).
bool LayerIndex(const std::string& s, int64_t* out) {
  if (!IsNumber(s) || s.size() > 18) return false;
  *out = std::stoll(s);
  return true;
}

std::string JoinSegments(const std::vector<std::string>& segments, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += (i ? "." : "") + segments[i];
  return out;
}

// The module lists whose numbered members are blocks (module_tree.h says when).
std::set<std::string> BlockLists(const std::vector<std::vector<std::string>>& paths) {
  // list P -> member index -> the child names below that member.
  std::map<std::string, std::map<int64_t, std::set<std::string>>> lists;
  for (const auto& segments : paths) {
    for (size_t i = 0; i < segments.size(); ++i) {
      int64_t index;
      if (!LayerIndex(segments[i], &index)) continue;
      auto& children = lists[JoinSegments(segments, i)][index];
      if (i + 1 < segments.size()) children.insert(segments[i + 1]);
    }
  }
  std::set<std::string> out;
  for (const auto& [list, members] : lists) {
    std::string last = list.substr(list.rfind('.') == std::string::npos ? 0 : list.rfind('.') + 1);
    if (last == "blocks" || last == "layers" || last == "h") {
      out.insert(list);
      continue;
    }
    bool alike = members.size() >= 2 && members.begin()->first == 0 &&
                 members.rbegin()->first == static_cast<int64_t>(members.size()) - 1;
    for (const auto& [index, children] : members)
      alike = alike && !children.empty() && children == members.begin()->second;
    if (alike) out.insert(list);
  }
  return out;
}

// The outermost block on `segments`' path, if any.
BlockPlace PlaceInBlocks(const std::vector<std::string>& segments,
                         const std::set<std::string>& block_lists) {
  for (size_t i = 0; i < segments.size(); ++i) {
    int64_t index;
    if (!LayerIndex(segments[i], &index)) continue;
    std::string list = JoinSegments(segments, i);
    if (block_lists.count(list)) return {list, index, i + 1 == segments.size()};
  }
  return {};
}

}  // namespace

const std::vector<CkptRegistryEntry>& CkptRegistry() { return kRegistry; }

bool IsCkptRegistryKey(const std::string& lowercase_name) {
  for (const auto& r : kRegistry)
    if (lowercase_name == r.key) return true;
  return false;
}

bool ModulePathLess(const std::string& a, const std::string& b) {
  return PathLess(Segments(a), Segments(b));
}

std::vector<std::string> RegistryKeys(const std::vector<std::string>& classes) {
  // The classes as written (qualified where the export qualifies them), then the known bases.
  std::vector<std::string> all;
  auto add_class = [&](const std::string& name) {
    if (name.empty()) return;
    for (const auto& c : all)
      if (BareClassName(c) == BareClassName(name)) return;
    all.push_back(name);
  };
  for (const auto& c : classes) add_class(c);
  for (size_t i = 0; i < all.size(); ++i)  // grows while known bases are appended
    for (const auto& kb : kKnownBases)
      if (BareClassName(all[i]) == kb.bare_class) add_class(kb.base);
  std::vector<std::string> keys;
  auto add_key = [&](const std::string& k) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  };
  for (const auto& c : all)
    for (const auto& r : kRegistry)
      if (RegistrySelects(r, c)) add_key(r.key);
  for (const auto& c : all) add_key(LowerAscii(BareClassName(c)));
  return keys;
}

std::vector<ModuleInfo> ListModules(const Graph& graph) {
  std::vector<std::pair<std::vector<std::string>, std::string>> order;
  for (const auto& [path, mod] : graph.modules) order.emplace_back(Segments(path), path);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return PathLess(a.first, b.first); });
  std::vector<std::vector<std::string>> all_segments;
  for (const auto& [segments, path] : order) all_segments.push_back(segments);
  const std::set<std::string> block_lists = BlockLists(all_segments);

  // Node counts: each node counts for its scope and every listed ancestor of it.
  std::unordered_map<std::string, int> direct;
  for (const Node& n : graph.nodes) ++direct[n.scope];
  std::map<std::string, int> counts;
  for (const auto& [scope, count] : direct) {
    for (const auto& [path, mod] : graph.modules)
      if (scope == path || IsInside(scope, path)) counts[path] += count;
  }

  std::vector<ModuleInfo> out;
  for (const auto& [segments, path] : order) {
    ModuleInfo info;
    info.path = path;
    info.classes = graph.modules.at(path).classes;
    info.qualified_class = info.classes.empty() ? "" : info.classes.front();
    info.registry_keys = RegistryKeys(info.classes);
    info.node_count = counts.count(path) ? counts.at(path) : 0;
    for (const auto& p : graph.parameters) {
      if (!IsInside(p, path)) continue;
      const Value* v = graph.FindValue(p);
      if (!v) continue;
      int64_t bytes = v->NumBytes();
      if (bytes < 0 && v->data) bytes = static_cast<int64_t>(v->data->nbytes());
      if (bytes > 0) info.param_bytes += bytes;
    }
    for (const auto& [other, mod] : graph.modules)
      if (other != path && (other.empty() ? !path.empty() : IsInside(path, other))) ++info.depth;
    BlockPlace place = PlaceInBlocks(segments, block_lists);
    info.block_index = place.index;
    info.is_block = place.is_block;
    info.block_list = place.list;
    if (info.is_block && std::find(info.registry_keys.begin(), info.registry_keys.end(),
                                   kBlockKey) == info.registry_keys.end()) {
      // After the registry keys, before the class names.
      auto at = std::find_if(info.registry_keys.begin(), info.registry_keys.end(),
                             [](const std::string& k) { return !IsRegistryKey(k); });
      info.registry_keys.insert(at, kBlockKey);
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::string FormatModuleTree(const std::vector<ModuleInfo>& modules) {
  struct Row {
    std::string module, cls, keys, nodes, params;
  };
  std::vector<Row> rows = {{"module", "class", "--ckpt keys", "nodes", "params"}};
  bool unknown_class = false;
  std::vector<std::string> lists;                      // in tree order
  std::map<std::string, std::vector<int64_t>> blocks;  // list -> indices, in tree order
  // Names that resolve before a child name does (ckpt_targets.h): registry keys, `block`, classes.
  std::set<std::string> taken = {kBlockKey};
  for (const auto& r : kRegistry) taken.insert(r.key);
  for (const auto& m : modules) {
    for (const auto& k : m.registry_keys) taken.insert(k);
    for (const auto& c : m.classes) taken.insert(LowerAscii(c));
  }
  for (const auto& m : modules) {
    Row r;
    r.module = std::string(2 * m.depth, ' ') + (m.path.empty() ? "(root)" : m.path);
    r.cls = m.qualified_class.empty() ? "?" : BareClassName(m.qualified_class);
    unknown_class |= m.qualified_class.empty();
    std::vector<std::string> keys;
    auto add = [&](const std::string& k) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    };
    // Modules outside the blocks cannot be checkpointed: no key selects them.
    if (m.block_index >= 0) {
      for (const auto& k : m.registry_keys)
        if (IsRegistryKey(k) || k == kBlockKey) add(k);
      if (!m.qualified_class.empty()) add(LowerAscii(BareClassName(m.qualified_class)));
      std::vector<std::string> segments = Segments(m.path);
      if (!m.is_block && segments.size() == Segments(m.block_list).size() + 2 &&
          !taken.count(LowerAscii(segments.back())))
        add(LowerAscii(segments.back()));
    }
    for (const auto& k : keys) r.keys += (r.keys.empty() ? "" : ",") + k;
    if (r.keys.empty()) r.keys = "-";
    r.nodes = std::to_string(m.node_count);
    r.params = HumanBytes(m.param_bytes);
    rows.push_back(std::move(r));
    if (m.is_block) {
      if (!blocks.count(m.block_list)) lists.push_back(m.block_list);
      blocks[m.block_list].push_back(m.block_index);
    }
  }
  size_t w[5] = {};
  for (const auto& r : rows) {
    w[0] = std::max(w[0], r.module.size());
    w[1] = std::max(w[1], r.cls.size());
    w[2] = std::max(w[2], r.keys.size());
    w[3] = std::max(w[3], r.nodes.size());
    w[4] = std::max(w[4], r.params.size());
  }
  auto pad_right = [](const std::string& s, size_t width) {
    return s + std::string(width - s.size(), ' ');
  };
  auto pad_left = [](const std::string& s, size_t width) {
    return std::string(width - s.size(), ' ') + s;
  };
  std::string out;
  for (const auto& r : rows) {
    std::string line = pad_right(r.module, w[0]) + "  " + pad_right(r.cls, w[1]) + "  " +
                       pad_right(r.keys, w[2]) + "  " + pad_left(r.nodes, w[3]) + "  " +
                       pad_left(r.params, w[4]);
    out += line + "\n";
  }
  for (const auto& list : lists) {
    std::vector<int64_t> n = blocks[list];
    std::sort(n.begin(), n.end());
    std::string indices;
    if (n.back() - n.front() + 1 == static_cast<int64_t>(n.size()) && n.size() > 1) {
      indices = std::to_string(n.front()) + ".." + std::to_string(n.back());
    } else {
      for (size_t i = 0; i < n.size(); ++i) indices += (i ? ", " : "") + std::to_string(n[i]);
    }
    out += std::string(kBlockKey) + ": " + (list.empty() ? "" : list + ".") + "N, N = " + indices +
           " (" + std::to_string(n.size()) + (n.size() == 1 ? " block" : " blocks") +
           ": the repeated instances of a module list; layer ranges count N)\n";
  }
  out +=
      "keys: the --ckpt names that select the module (case-insensitive; a base class's name "
      "selects too; modules outside the blocks are never checkpointed)\n";
  if (unknown_class)
    out +=
        "?: the export names no class for the module (a plain torch.onnx.export; foundry's "
        "exporter adds the classes)\n";
  return out;
}

}  // namespace foundry
