// Semantics, and where they differ from llm-foundry (llmfoundry/models/utils/act_ckpt.py):
//
// Layers. `first-n`, `last-k`, `middle-m`, `range-i-j` clamp to the model's layers exactly as
// upstream's parse_ele_str does (`first-9` on 4 layers = all 4; `middle-m` starts at
// max(max_block_idx // 2 - m // 2, 0)); an int n is upstream's range(n), so n > num_layers is
// every layer too. Differences: an explicit index outside 0..num_layers-1 is an error (upstream
// silently checkpoints nothing for it); a spec that selects no layer at all (`0`, `range-2-2`) is
// an error (upstream silently does nothing); bare indices are accepted in the comma-separated
// text (`0,2,5`, docs/design.md §3; upstream takes them only in a YAML list); spaces are removed
// first, as upstream does.
//
// Names resolve in this order, first hit wins, case-insensitively: (1) an llm-foundry registry key
// (every one upstream has; module_tree.h); (2) `block`; (3) a class name, bare or qualified, of
// any module of the model (bases included); (4) a child name of the blocks (one segment, no `*`);
// (5) a module path glob. So a child called `mlp` is not reachable by name in a model that also
// has a class `MLP`; the glob `transformer.h.*.mlp` still reaches it. `*` matches any run of
// characters inside one path segment (`*` alone = one whole segment); there is no `**`.
// Layers apply to the index of the block an instance is in; with several lists of blocks, each is
// counted on its own.
#include "compiler/ckpt_targets.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <variant>

#include "base/file_util.h"
#include "base/quote.h"
#include "compiler/module_tree.h"
#include "compiler/yaml_words.h"

namespace foundry {

// A name or value from the user's file or command line as a message quotes it: control
// characters escaped (a key may hold a newline), at most 200 bytes.
static std::string Shown(std::string_view s) { return Clip(EscapeName(s)); }

namespace {

constexpr const char* kLayerForms =
    "accepted: an int n (the first n layers), a comma-separated list of first-n, last-k, middle-m, "
    "range-i-j (half-open) and layer indices, or a list [0,2,5]";

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

// A non-negative decimal that fits comfortably in int64.
bool ParseCount(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  *out = std::stoll(s);
  return true;
}

// One element of a layer spec, before the model's layer count is known.
struct LayerItem {
  enum Kind { kFirst, kLast, kMiddle, kRange, kIndex } kind;
  int64_t a = 0, b = 0;
};

// The syntax of a layer spec (see the top of the file); "" = every layer (no items, all = true).
StatusOr<std::vector<LayerItem>> ParseLayerItems(const std::string& spec) {
  std::string s;
  for (char c : spec)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  auto malformed = [&]() {
    return Error("malformed layers '" + Shown(spec) + "'; " + kLayerForms);
  };
  if (s.empty()) return malformed();
  int64_t n;
  if (ParseCount(s, &n)) return std::vector<LayerItem>{{LayerItem::kFirst, n, 0}};
  bool list = s.front() == '[';
  if (list) {
    if (s.size() < 2 || s.back() != ']') return malformed();
    s = s.substr(1, s.size() - 2);
    if (s.empty()) return malformed();
  }
  std::vector<LayerItem> items;
  for (std::string e : Split(s, ',')) {
    // A config list writes its strings quoted when it is echoed back as text.
    if (e.size() >= 2 && (e.front() == '\'' || e.front() == '"') && e.back() == e.front())
      e = e.substr(1, e.size() - 2);
    auto prefixed = [&](const char* prefix, std::string* rest) {
      size_t len = std::string(prefix).size();
      if (e.compare(0, len, prefix) != 0) return false;
      *rest = e.substr(len);
      return true;
    };
    std::string rest;
    int64_t a, b;
    if (ParseCount(e, &a)) {
      items.push_back({LayerItem::kIndex, a, 0});
    } else if (prefixed("first-", &rest) && ParseCount(rest, &a)) {
      items.push_back({LayerItem::kFirst, a, 0});
    } else if (prefixed("last-", &rest) && ParseCount(rest, &a)) {
      items.push_back({LayerItem::kLast, a, 0});
    } else if (prefixed("middle-", &rest) && ParseCount(rest, &a)) {
      items.push_back({LayerItem::kMiddle, a, 0});
    } else if (prefixed("range-", &rest)) {
      std::vector<std::string> r = Split(rest, '-');
      if (r.size() != 2 || !ParseCount(r[0], &a) || !ParseCount(r[1], &b)) return malformed();
      items.push_back({LayerItem::kRange, a, b});
    } else {
      return malformed();
    }
  }
  return items;
}

std::string LayerRange(int64_t num_layers) {
  return num_layers == 1 ? "layer 0" : "layers 0.." + std::to_string(num_layers - 1);
}

StatusOr<std::vector<int64_t>> EvalLayerItems(const std::string& spec,
                                              const std::vector<LayerItem>& items,
                                              int64_t num_layers) {
  const int64_t max_idx = num_layers - 1;
  std::set<int64_t> out;
  auto add_range = [&](int64_t start, int64_t end) {
    for (int64_t i = std::max<int64_t>(start, 0); i < std::min(end, num_layers); ++i) out.insert(i);
  };
  for (const LayerItem& it : items) {
    switch (it.kind) {
      case LayerItem::kFirst:
        add_range(0, it.a);
        break;
      case LayerItem::kLast:
        add_range(max_idx - it.a + 1, num_layers);
        break;
      case LayerItem::kMiddle: {
        int64_t start = std::max<int64_t>(max_idx / 2 - it.a / 2, 0);
        add_range(start, start + it.a);
        break;
      }
      case LayerItem::kRange:
        add_range(it.a, it.b);
        break;
      case LayerItem::kIndex:
        if (it.a > max_idx)
          return Error("layer " + std::to_string(it.a) + " in '" + Shown(spec) +
                       "' is out of range: the model has " + LayerRange(num_layers));
        out.insert(it.a);
        break;
    }
  }
  if (out.empty())
    return Error("layers '" + Shown(spec) + "' select no layer: the model has " +
                 LayerRange(num_layers));
  return std::vector<int64_t>(out.begin(), out.end());
}

// Where a target came from, to start its error messages.
std::string Where(const CkptTarget& t) {
  if (t.source.empty()) return "--ckpt " + Shown(t.Text());
  if (t.source.compare(0, 13, "--ckpt-config") == 0 || t.source.compare(0, 8, "--config") == 0)
    return t.source + " (" + Shown(t.Text()) + ")";
  return t.source;
}

// fnmatch with `*` only, case-insensitive, inside one segment.
bool SegmentMatch(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] != '*' &&
        std::tolower(static_cast<unsigned char>(pattern[p])) ==
            std::tolower(static_cast<unsigned char>(text[t]))) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool PathMatch(const std::string& glob, const std::string& path) {
  if (path.empty()) return false;  // the root has no path to match
  std::vector<std::string> g = Split(glob, '.'), s = Split(path, '.');
  if (g.size() != s.size()) return false;
  for (size_t i = 0; i < g.size(); ++i)
    if (!SegmentMatch(g[i], s[i])) return false;
  return true;
}

// The model's module tree, with what the matching needs about each module.
struct Tree {
  std::vector<ModuleInfo> modules;
  // Blocks by path (listed modules or not: a block need not be a module of its own), tree order.
  std::vector<std::string> blocks;
  std::map<std::string, int64_t> block_index;
  std::map<std::string, std::string> block_list_of;  // block path -> its list P
  std::map<std::string, int64_t> num_layers;         // list P -> max N + 1
  std::set<std::string> child_names;                 // lowercase children of blocks
  std::set<std::string> children_display;            // as written
  bool has_classes = false;
};

std::string BlockPathOf(const ModuleInfo& m) {
  size_t depth = Split(m.block_list, '.').size() + 1;
  std::vector<std::string> s = Split(m.path, '.');
  s.resize(depth);
  return Join(s, ".");
}

Tree BuildTree(const Graph& graph) {
  Tree t;
  t.modules = ListModules(graph);
  for (const auto& m : t.modules) {
    t.has_classes |= !m.classes.empty();
    if (m.block_index < 0) continue;
    std::string block = BlockPathOf(m);
    if (!t.block_index.count(block)) {
      t.blocks.push_back(block);
      t.block_index[block] = m.block_index;
      t.block_list_of[block] = m.block_list;
      t.num_layers[m.block_list] = std::max(t.num_layers[m.block_list], m.block_index + 1);
    }
    std::vector<std::string> s = Split(m.path, '.');
    if (!m.is_block && s.size() == Split(block, '.').size() + 1) {
      t.child_names.insert(Lower(s.back()));
      t.children_display.insert(s.back());
    }
  }
  std::sort(t.blocks.begin(), t.blocks.end(), ModulePathLess);
  return t;
}

// Every class of a module, qualified as written, bare, and the bare names of the known bases
// (ModuleInfo::registry_keys holds those lowercase after the registry keys).
bool HasClass(const ModuleInfo& m, const std::string& lower_name) {
  for (const auto& c : m.classes)
    if (Lower(c) == lower_name) return true;
  for (const auto& k : m.registry_keys)
    if (!IsCkptRegistryKey(k) && k != kBlockKey && k == lower_name) return true;
  return false;
}

// The names that select something inside this model's blocks, for the unknown-name error.
std::string NamesInModel(const Tree& t) {
  std::map<std::string, std::string> names;  // lowercase -> as shown; first form kept
  auto add = [&](const std::string& n) { names.emplace(Lower(n), n); };
  for (const auto& m : t.modules) {
    if (m.block_index < 0) continue;
    for (const auto& k : m.registry_keys)
      if (IsCkptRegistryKey(k)) add(k);
  }
  if (!t.blocks.empty()) add(kBlockKey);
  for (const auto& m : t.modules)
    if (m.block_index >= 0 && !m.qualified_class.empty()) add(BareClassName(m.qualified_class));
  for (const auto& c : t.children_display) add(c);
  std::vector<std::string> out;
  for (const auto& [lower, shown] : names) out.push_back(shown);
  return Join(out, ", ");
}

std::string BlockGlob(const Tree& t) {
  if (t.blocks.empty()) return "";
  return t.block_list_of.at(t.blocks.front()) + ".*";
}

std::string ChildList(const Tree& t) {
  return Join(std::vector<std::string>(t.children_display.begin(), t.children_display.end()), ", ");
}

// For a class name on a model without classes: a guess at the glob that selects the same modules
// (a child whose name the class name contains, the blocks for a *Block / *Layer class).
std::string SuggestedGlob(const Tree& t, const std::string& name) {
  std::string lower = Lower(BareClassName(name));
  std::string best;
  for (const auto& c : t.children_display) {
    std::string lc = Lower(c);
    std::string stripped;
    for (char ch : lc)
      if (ch != '_') stripped += ch;
    if ((lower.find(lc) != std::string::npos || lower.find(stripped) != std::string::npos) &&
        c.size() > best.size())
      best = c;
  }
  if (!best.empty()) return BlockGlob(t) + "." + best;
  if (lower.find("block") != std::string::npos || lower.find("layer") != std::string::npos ||
      t.children_display.empty())
    return BlockGlob(t);
  return BlockGlob(t) + "." + *t.children_display.begin();
}

std::string Abbreviate(const std::vector<std::string>& paths) {
  std::vector<std::string> shown(paths.begin(), paths.begin() + std::min<size_t>(paths.size(), 3));
  std::string out = Join(shown, ", ");
  if (paths.size() > 3) out += ", ... (" + std::to_string(paths.size()) + " modules)";
  return out;
}

std::string BlocksText(const Tree& t) {
  std::vector<std::string> lists;
  for (const auto& [list, n] : t.num_layers)
    lists.push_back((list.empty() ? "" : list + ".") + "N");
  return Join(lists, ", ");
}

// The candidates one target selects: paths of modules (or blocks) with their block index.
struct Candidate {
  std::string path;
  std::string class_name;
  int64_t layer;
  std::string list;
};

StatusOr<std::vector<Candidate>> Resolve(const Tree& t, const CkptTarget& target) {
  const std::string name = Lower(target.name);
  const std::string where = Where(target);
  std::vector<const ModuleInfo*> matched;
  enum { kKey, kBlock, kClass, kChild, kGlob } how = kGlob;
  const CkptRegistryEntry* entry = nullptr;
  for (const auto& r : CkptRegistry())
    if (name == r.key) entry = &r;
  if (entry) {
    how = kKey;
    for (const auto& m : t.modules)
      if (std::find(m.registry_keys.begin(), m.registry_keys.end(), name) != m.registry_keys.end())
        matched.push_back(&m);
  } else if (name == kBlockKey) {
    how = kBlock;
  } else {
    for (const auto& m : t.modules)
      if (HasClass(m, name)) matched.push_back(&m);
    if (!matched.empty()) {
      how = kClass;
    } else if (t.child_names.count(name)) {
      how = kChild;
      for (const auto& m : t.modules) {
        if (m.block_index < 0 || m.is_block) continue;
        std::vector<std::string> s = Split(m.path, '.');
        if (s.size() == Split(m.block_list, '.').size() + 2 && Lower(s.back()) == name)
          matched.push_back(&m);
      }
    } else {
      for (const auto& m : t.modules)
        if (PathMatch(name, m.path)) matched.push_back(&m);
    }
  }

  std::vector<Candidate> out;
  if (how == kBlock) {
    for (const auto& b : t.blocks) {
      std::string cls;
      for (const auto& m : t.modules)
        if (m.path == b) cls = m.qualified_class;
      out.push_back({b, cls, t.block_index.at(b), t.block_list_of.at(b)});
    }
    return out;  // never empty: SelectCkptTargets turns a model without blocks away first
  }
  std::vector<std::string> outside;
  for (const ModuleInfo* m : matched) {
    if (m->block_index < 0) {
      outside.push_back(m->path.empty() ? "(root)" : m->path);
      continue;
    }
    out.push_back({m->path, m->qualified_class, m->block_index, m->block_list});
  }
  if (!out.empty()) return out;

  const std::string bare = BareClassName(target.name);
  const bool looks_like_class = target.name.find('*') == std::string::npos &&
                                (target.name.find('.') == std::string::npos ||
                                 std::any_of(bare.begin(), bare.end(), [](char c) {
                                   return std::isupper(static_cast<unsigned char>(c));
                                 }));
  if (!t.has_classes && matched.empty() && looks_like_class && !t.blocks.empty()) {
    return Error(where + ": '" + Shown(target.name) +
                 "' names no module path or child of this model, and the file carries no "
                 "classes to match a class name against (a stock torch.onnx.export); try a path "
                 "glob such as '" +
                 Shown(SuggestedGlob(t, target.name)) +
                 "' (children of each block: " + ChildList(t) + ")");
  }
  if (!outside.empty()) {
    return Error(where + ": '" + Shown(target.name) +
                 "' matches only modules outside the blocks (" + Abbreviate(outside) +
                 "); only modules inside the blocks (" + BlocksText(t) + ") can be checkpointed");
  }
  if (how == kKey) {
    return Error(where + ": '" + Shown(target.name) + "' (llm-foundry's key for " +
                 entry->bare_class + ") matches nothing in this model: no module is a " +
                 entry->bare_class +
                 "; names that select modules in its blocks: " + NamesInModel(t));
  }
  if (target.name.find('.') == std::string::npos && target.name.find('*') == std::string::npos) {
    return Error(where + ": unknown name '" + Shown(target.name) +
                 "'; names that select modules in this model's blocks: " + NamesInModel(t) +
                 " (or a module path glob such as '" + BlockGlob(t) + "')");
  }
  return Error(where + ": '" + Shown(target.name) +
               "' matches nothing in this model: no module path matches it (blocks: " +
               BlocksText(t) + "; children of each block: " + ChildList(t) + ")");
}

std::string LayerText(const std::vector<int64_t>& layers) {
  std::vector<std::string> s;
  for (int64_t l : layers) s.push_back(std::to_string(l));
  return Join(s, ", ");
}

}  // namespace

StatusOr<std::vector<int64_t>> ParseLayerSpec(const std::string& spec, int64_t num_layers) {
  ASSIGN_OR_RETURN(std::vector<LayerItem> items, ParseLayerItems(spec));
  if (num_layers <= 0) return Error("layers '" + Shown(spec) + "': the model has no layers");
  return EvalLayerItems(spec, items, num_layers);
}

StatusOr<CkptTarget> ParseCkptArg(const std::string& arg) {
  auto malformed = [&](const std::string& why) {
    return Error("--ckpt '" + Shown(arg) + "': " + why +
                 "; accepted: NAME or NAME=LAYERS, NAME a registry key (mptblock), a class name, "
                 "`block`, a child name of the blocks (attn) or a module path glob "
                 "(transformer.blocks.*.attn), LAYERS n (the first n), first-n,last-k,middle-m,"
                 "range-i-j or [0,2,5]");
  };
  CkptTarget t;
  t.source = "--ckpt " + Shown(arg);
  size_t eq = arg.find('=');
  t.name = arg.substr(0, eq);
  if (t.name.empty()) return malformed("no name");
  if (std::any_of(t.name.begin(), t.name.end(),
                  [](char c) { return std::isspace(static_cast<unsigned char>(c)); }))
    return malformed("a space in the name");
  if (eq != std::string::npos) {
    t.layers = arg.substr(eq + 1);
    // The layer error says what LAYERS accepts.
    auto items = ParseLayerItems(t.layers);
    if (!items.ok()) return Error("--ckpt '" + Shown(arg) + "': " + items.status().message());
  }
  return t;
}

bool IsPlainYaml(const YAML::Node& n) { return n.IsScalar() && n.Tag() == "?"; }

std::string YamlKindOf(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "'" + Shown(n.Scalar()) + "'";
  }
}

namespace {

bool AsInt(const YAML::Node& n, int64_t* out) {
  if (!IsPlainYaml(n)) return false;
  return YAML::convert<int64_t>::decode(n, *out);
}

// The target value (string, list of strings, or dict name -> layers) as CkptTargets.
StatusOr<std::vector<CkptTarget>> TargetsFrom(const YAML::Node& value, const std::string& source,
                                              const std::string& key) {
  auto wrong = [&](const std::string& at, const YAML::Node& n, const std::string& expected) {
    return Error(source + ": " + at + " is " + YamlKindOf(n) + "; expected " + expected);
  };
  auto name_of = [&](const YAML::Node& n, const std::string& at) -> StatusOr<std::string> {
    if (!n.IsScalar() || n.Scalar().empty())
      return wrong(at, n, "a module name (mptblock, a class name, block, a path glob)");
    return n.Scalar();
  };
  std::vector<CkptTarget> out;
  if (value.IsNull() || (value.IsSequence() && value.size() == 0)) {
    out.push_back({kBlockKey, "", source});
  } else if (value.IsScalar()) {
    ASSIGN_OR_RETURN(std::string name, name_of(value, key));
    out.push_back({name, "", source});
  } else if (value.IsSequence()) {
    for (size_t i = 0; i < value.size(); ++i) {
      ASSIGN_OR_RETURN(std::string name, name_of(value[i], key + "[" + std::to_string(i) + "]"));
      out.push_back({name, "", source});
    }
  } else {
    for (const auto& kv : value) {
      ASSIGN_OR_RETURN(std::string name, name_of(kv.first, "a key of " + key));
      const std::string at = key + "." + Shown(name);
      const YAML::Node& v = kv.second;
      std::string layers;
      int64_t n;
      if (AsInt(v, &n)) {
        if (n < 0) return wrong(at, v, "layers (" + std::string(kLayerForms) + ")");
        layers = std::to_string(n);
      } else if (v.IsScalar() && !v.Scalar().empty()) {
        layers = v.Scalar();
      } else if (v.IsSequence() && v.size() > 0) {
        std::vector<std::string> items;
        for (size_t i = 0; i < v.size(); ++i) {
          if (AsInt(v[i], &n) && n >= 0) {
            items.push_back(std::to_string(n));
          } else if (v[i].IsScalar() && !IsPlainYaml(v[i]) && !v[i].Scalar().empty()) {
            items.push_back(v[i].Scalar());
          } else if (v[i].IsScalar() && IsPlainYaml(v[i]) && !AsInt(v[i], &n)) {
            items.push_back(v[i].Scalar());
          } else {
            return wrong(at + "[" + std::to_string(i) + "]", v[i],
                         "a layer index or first-n, last-k, middle-m, range-i-j");
          }
        }
        layers = "[" + Join(items, ",") + "]";
      } else {
        return wrong(at, v, std::string("layers (") + kLayerForms + ")");
      }
      auto items = ParseLayerItems(layers);
      if (!items.ok()) return Error(source + ": " + at + ": " + items.status().message());
      out.push_back({name, layers, source});
    }
  }
  return out;
}

}  // namespace

namespace {

// What yaml-cpp accepts and an llm-foundry config may not hold, found on the parser's events
// before any node is built (so an alias is never expanded): an anchor or alias (2,000 aliases of
// a 1 MiB scalar expand to 4 GB; a target never needs them), a merge key `<<` (yaml-cpp ignores
// it), a key given twice in one mapping (yaml-cpp keeps the first, PyYAML the last, OmegaConf
// rejects the file), and a second document or node after the first (yaml-cpp reads the first
// and ignores the rest). The first problem found is kept.
class StrictYamlScan : public YAML::EventHandler {
 public:
  std::string problem;
  int documents = 0;

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents > 1)
      Fail(mark,
           "a second YAML document or value follows the first; the file must hold one "
           "(a target value, or one whole llm-foundry config)");
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Anchor(mark, anchor);
    Item(mark, "", /*scalar=*/true, /*plain=*/true);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    Fail(mark,
         "an alias (*name): anchors and aliases are not accepted (an llm-foundry target "
         "never needs them); write the value out");
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    Anchor(mark, anchor);
    Item(mark, value, /*scalar=*/true, tag == "?");
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Anchor(mark, anchor);
    Item(mark, "", /*scalar=*/false, false);
    frames_.push_back({});
  }
  void OnSequenceEnd() override { frames_.pop_back(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Anchor(mark, anchor);
    Item(mark, "", /*scalar=*/false, false);
    frames_.push_back({/*map=*/true, /*expect_key=*/true, {}});
  }
  void OnMapEnd() override { frames_.pop_back(); }

 private:
  struct Frame {
    bool map = false;
    bool expect_key = false;
    std::map<std::string, int> keys;  // key -> its line (1-based)
  };
  void Fail(const YAML::Mark& mark, const std::string& what) {
    if (problem.empty()) problem = "line " + std::to_string(mark.line + 1) + ": " + what;
  }
  void Anchor(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != 0)
      Fail(mark,
           "an anchor (&name): anchors and aliases are not accepted (an llm-foundry "
           "target never needs them); write the value out");
  }
  // A node starts: a key or a value of the mapping it is in.
  void Item(const YAML::Mark& mark, const std::string& text, bool scalar, bool plain) {
    if (frames_.empty() || !frames_.back().map) return;
    Frame& f = frames_.back();
    if (!f.expect_key) {
      f.expect_key = true;  // the next node at this level is a key again
      return;
    }
    f.expect_key = false;
    if (!scalar) return Fail(mark, "a key that is a list or a mapping; keys are names");
    if (plain && text == "<<")
      return Fail(mark,
                  "a merge key '<<': merging is not accepted (nor are the aliases it "
                  "needs); write the keys out");
    auto [it, inserted] = f.keys.emplace(text, mark.line + 1);
    if (!inserted)
      Fail(mark, "key '" + Shown(text) + "' appears twice in one mapping (first at line " +
                     std::to_string(it->second) +
                     "); OmegaConf, which llm-foundry uses, rejects that: keep one");
  }
  std::vector<Frame> frames_;
};

// ParseCkptConfigText, with yaml-cpp's exceptions left to the caller.
StatusOr<CkptConfig> ParseYamlConfig(const std::string& text, const std::string& path,
                                     const std::string& option) {
  const std::string source = option + " " + path;
  if (std::string problem = StrictYamlProblem(text); !problem.empty())
    return Error(source + ": " + problem);
  const YAML::Node root = YAML::Load(text);
  CkptConfig config;
  if (!root.IsDefined() || root.IsNull())
    return Error(source +
                 ": the file is empty; write an activation_checkpointing_target value "
                 "(mptblock, a list, or {name: layers}) or a whole llm-foundry config");
  const bool whole = root.IsMap() && (root["model"].IsDefined() || root["fsdp_config"].IsDefined());
  if (!whole) {
    ASSIGN_OR_RETURN(config.targets, TargetsFrom(root, source, "the target"));
    return config;
  }
  // A key the file lacks is an invalid node in yaml-cpp: IsDefined() is the only call it answers
  // (the others throw), so each of these is tested for it first.
  const YAML::Node model = root["model"].IsDefined() ? root["model"] : YAML::Node();
  const YAML::Node fsdp = root["fsdp_config"].IsDefined() ? root["fsdp_config"] : YAML::Node();
  if (model.IsDefined() && !model.IsNull() && !model.IsMap())
    return Error(source + ": key 'model' is " + YamlKindOf(model) + "; expected a mapping");
  if (fsdp.IsDefined() && !fsdp.IsNull() && !fsdp.IsMap())
    return Error(source + ": key 'fsdp_config' is " + YamlKindOf(fsdp) + "; expected a mapping");
  const YAML::Node target = model.IsMap() && model["activation_checkpointing_target"].IsDefined()
                                ? model["activation_checkpointing_target"]
                                : YAML::Node();
  bool flag = false;
  if (fsdp.IsMap() && fsdp["activation_checkpointing"].IsDefined()) {
    const YAML::Node f = fsdp["activation_checkpointing"];
    if (!IsPlainYaml(f) || !YAML::convert<bool>::decode(f, flag))
      return Error(source + ": key 'fsdp_config.activation_checkpointing' is " + YamlKindOf(f) +
                   "; expected true or false");
  }
  if (root["precision"].IsDefined()) {
    const YAML::Node p = root["precision"];
    if (!p.IsScalar())
      return Error(source + ": key 'precision' is " + YamlKindOf(p) +
                   "; expected amp_bf16 or fp32, as llm-foundry writes it");
    config.precision = p.Scalar();
  }
  const bool target_set =
      target.IsDefined() && !target.IsNull() && !(target.IsSequence() && target.size() == 0);
  if (!flag) {
    config.enabled = false;
    if (target_set)
      config.warnings.push_back(
          path +
          ": model.activation_checkpointing_target is set but fsdp_config."
          "activation_checkpointing is " +
          std::string(fsdp.IsMap() && fsdp["activation_checkpointing"].IsDefined() ? "false"
                                                                                   : "absent") +
          ": nothing is checkpointed (llm-foundry reads the target only when the flag is true)");
    return config;
  }
  ASSIGN_OR_RETURN(config.targets, TargetsFrom(target.IsDefined() ? target : YAML::Node(), source,
                                               "key 'model.activation_checkpointing_target'"));
  return config;
}

}  // namespace

std::string StrictYamlProblem(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  StrictYamlScan scan;
  while (scan.problem.empty() && parser.HandleNextDocument(scan)) {
  }
  return scan.problem;
}

StatusOr<CkptConfig> ParseCkptConfigText(const std::string& text, const std::string& path,
                                         const std::string& option) {
  // yaml-cpp reports by exception; nothing escapes this function but a Status.
  try {
    return ParseYamlConfig(text, path, option);
  } catch (const YAML::ParserException& e) {
    return Error(option + " " + path + ": YAML syntax error at line " +
                 std::to_string(e.mark.line + 1) + ", column " + std::to_string(e.mark.column + 1) +
                 ": " + Shown(e.msg));
  } catch (const YAML::Exception& e) {
    return Error(option + " " + path + ": cannot read the file: " + Shown(e.msg));
  }
}

StatusOr<std::string> ReadConfigText(const std::string& source, const std::string& path,
                                     const std::string& folder_advice,
                                     const std::string& device_advice) {
  auto read = ReadRegularFile(path, kMaxCkptConfigBytes);
  const ReadFileError* e = std::get_if<ReadFileError>(&read);
  if (!e) return std::get<std::string>(std::move(read));
  using Kind = ReadFileError::Kind;
  switch (e->kind) {
    case Kind::kCannotStat:
      return Error(source + ": cannot read the file: " + std::strerror(e->error_number));
    case Kind::kFolder:
      return Error(source + ": it is a folder; " + folder_advice);
    case Kind::kNotRegular:
      return Error(source + ": it is not a regular file (a device or a pipe); " + device_advice);
    case Kind::kTooLarge:
      return Error(source + ": the file is " + std::to_string(e->size) +
                   " bytes; a config is read only up to " + std::to_string(kMaxCkptConfigBytes) +
                   " (an llm-foundry training YAML is a few KiB)");
    case Kind::kCannotOpen:
    case Kind::kCannotRead:
      break;
  }
  return Error(source + ": cannot read the file");
}

StatusOr<CkptConfig> ReadCkptConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text,
                   ReadConfigText("--ckpt-config " + path, path, "give the YAML or JSON file",
                                  "give the YAML or JSON file"));
  return ParseCkptConfigText(text, path);
}

std::string NestingNote(const std::string& inner_module, const std::string& inner_target,
                        const std::string& outer_module, const std::string& outer_target) {
  return inner_module + " (" + inner_target + ") is inside " + outer_module + " (" + outer_target +
         "): the outer target wins";
}

std::string CkptNesting::Note() const {
  return NestingNote(inner.module, inner.target, outer.module, outer.target);
}

std::vector<std::string> CkptSelection::notes() const {
  std::vector<std::string> out;
  for (const CkptNesting& n : nested) out.push_back(n.Note());
  return out;
}

StatusOr<CkptSelection> SelectCkptTargets(const Graph& graph,
                                          const std::vector<CkptTarget>& targets) {
  CkptSelection sel;
  for (const auto& t : targets) sel.targets.push_back(t.Text());
  if (targets.empty()) return sel;
  if (graph.modules.empty())
    return Error(Where(targets.front()) +
                 ": the model carries no module annotations to match a target against; export it "
                 "with models/export_mpt.py (--annotations scopes or functions), with torch >= "
                 "1.13's torch.onnx.export (scoped node names), with torch.onnx.export(..., "
                 "export_modules_as_functions=...) or with torch >= 2.5's dynamo exporter");
  Tree tree = BuildTree(graph);
  if (tree.blocks.empty())
    return Error(Where(targets.front()) +
                 ": the model has no blocks (repeated instances of a module list, module_tree.h), "
                 "and only modules inside blocks can be checkpointed; foundry-compile "
                 "--list-modules shows its module tree");

  // Check every layer spec's syntax before any name: a malformed spec is wrong on any model.
  for (const auto& t : targets) {
    if (t.layers.empty()) continue;
    auto items = ParseLayerItems(t.layers);
    if (!items.ok()) return Error(Where(t) + ": " + items.status().message());
  }

  std::map<std::string, size_t> chosen;  // module path -> index into `picked`
  std::vector<CkptInstance> picked;
  for (const auto& t : targets) {
    ASSIGN_OR_RETURN(std::vector<Candidate> cands, Resolve(tree, t));
    std::map<std::string, std::set<int64_t>> layers;  // list -> selected layers
    std::set<std::string> lists;
    for (const auto& c : cands) lists.insert(c.list);
    for (const auto& list : lists) {
      if (t.layers.empty()) continue;
      ASSIGN_OR_RETURN(std::vector<LayerItem> items, ParseLayerItems(t.layers));
      auto l = EvalLayerItems(t.layers, items, tree.num_layers.at(list));
      if (!l.ok())
        return Error(Where(t) + ": " + l.status().message() + " (" +
                     (list.empty() ? "" : list + ".") + "N)");
      layers[list] = std::set<int64_t>(l->begin(), l->end());
    }
    std::set<int64_t> seen_layers;
    bool any = false;
    for (const auto& c : cands) {
      seen_layers.insert(c.layer);
      if (!t.layers.empty() && !layers[c.list].count(c.layer)) continue;
      any = true;
      if (chosen.count(c.path)) continue;  // an earlier target selected it: it stays that one's
      chosen[c.path] = picked.size();
      picked.push_back({c.path, c.class_name, c.layer, t.Text(), c.list});
    }
    if (!any) {
      std::set<int64_t> wanted;
      for (const auto& [list, l] : layers) wanted.insert(l.begin(), l.end());
      return Error(Where(t) + ": '" + Shown(t.name) + "' matches nothing in layers " +
                   LayerText(std::vector<int64_t>(wanted.begin(), wanted.end())) +
                   ": the modules it names are in layers " +
                   LayerText(std::vector<int64_t>(seen_layers.begin(), seen_layers.end())) +
                   " only");
    }
  }

  std::sort(picked.begin(), picked.end(), [](const CkptInstance& a, const CkptInstance& b) {
    return ModulePathLess(a.module, b.module);
  });
  for (const auto& inst : picked) {
    const CkptInstance* outer = nullptr;
    for (const auto& other : picked) {
      if (other.module.size() < inst.module.size() &&
          inst.module.compare(0, other.module.size() + 1, other.module + ".") == 0 &&
          (!outer || other.module.size() < outer->module.size()))
        outer = &other;
    }
    if (outer) {
      sel.nested.push_back({inst, *outer});
    } else {
      sel.instances.push_back(inst);
    }
  }
  return sel;
}

}  // namespace foundry
