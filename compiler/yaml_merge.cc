#include "compiler/yaml_merge.h"

#include <yaml-cpp/yaml.h>

#include <optional>
#include <sstream>
#include <vector>

#include "base/quote.h"
#include "compiler/ckpt_targets.h"

namespace foundry {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

size_t Indent(const std::string& line) {
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  return i;
}

bool BlankOrComment(const std::string& line) {
  const size_t i = Indent(line);
  return i == line.size() || line[i] == '#';
}

// The key of a `key:` or `key: value` line at its indentation (plain keys only), else nullopt;
// `rest` gets what follows the colon, trimmed, without a trailing comment.
std::optional<std::string> KeyOf(const std::string& line, std::string* rest = nullptr) {
  const size_t start = Indent(line);
  size_t colon = line.find(':', start);
  if (colon == std::string::npos || colon == start) return std::nullopt;
  if (colon + 1 < line.size() && line[colon + 1] != ' ' && line[colon + 1] != '\t')
    return std::nullopt;
  const std::string key = line.substr(start, colon - start);
  for (char c : key)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      return std::nullopt;
  if (rest) {
    std::string r = line.substr(colon + 1);
    if (size_t hash = r.find(" #"); hash != std::string::npos) r = r.substr(0, hash);
    if (!r.empty() && r[0] == '#') r.clear();
    r.erase(0, r.find_first_not_of(" \t"));
    r.erase(r.find_last_not_of(" \t") + 1);
    *rest = r;
  }
  return key;
}

// Sets `section.key` to `value` ("" = remove the key) in `lines`.
Status SetKey(std::vector<std::string>& lines, const std::string& path, const std::string& section,
              const std::string& key, const std::string& value, const std::string& note) {
  // The section's line: a top-level `section:` with nothing after the colon.
  size_t at = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (Indent(lines[i]) != 0 || BlankOrComment(lines[i])) continue;
    std::string rest;
    if (KeyOf(lines[i], &rest) == section) {
      if (!rest.empty())
        return Error("--merge-into " + path + ": '" + section + ":' (line " +
                     std::to_string(i + 1) + ") has its value on the key line (" + Clip(rest) +
                     "); foundry merges into block mappings as llm-foundry writes them: set " +
                     section + "." + key + " by hand");
      at = i;
      break;
    }
  }
  const std::string comment = note.empty() ? "" : "# " + note;
  if (at == lines.size()) {
    if (value.empty()) return Status::Ok();
    if (!lines.empty() && !lines.back().empty()) lines.push_back("");
    if (!comment.empty()) lines.push_back(comment);
    lines.push_back(section + ":");
    lines.push_back("  " + key + ": " + value);
    return Status::Ok();
  }
  // The section's block: the lines after it up to the next top-level key.
  size_t end = at + 1;
  while (end < lines.size() && (BlankOrComment(lines[end]) || Indent(lines[end]) > 0)) ++end;
  // The last content line of the block (trailing blank lines and comments belong to what
  // follows), and the children's indentation.
  size_t last = at;
  size_t child = 0;
  for (size_t i = at + 1; i < end; ++i)
    if (!BlankOrComment(lines[i])) {
      last = i;
      if (child == 0) child = Indent(lines[i]);
    }
  if (child == 0) child = 2;
  for (size_t i = at + 1; i <= last; ++i) {
    if (BlankOrComment(lines[i]) || Indent(lines[i]) != child) continue;
    if (KeyOf(lines[i]) != key) continue;
    // The key's lines: it and everything more indented after it.
    size_t stop = i + 1;
    while (stop <= last && (BlankOrComment(lines[stop]) || Indent(lines[stop]) > child)) ++stop;
    // Trailing comments of the block stay.
    while (stop > i + 1 && BlankOrComment(lines[stop - 1])) --stop;
    lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(i),
                lines.begin() + static_cast<std::ptrdiff_t>(stop));
    if (!value.empty()) {
      lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i),
                   std::string(child, ' ') + key + ": " + value);
      if (!comment.empty())
        lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i),
                     std::string(child, ' ') + comment);
    }
    return Status::Ok();
  }
  if (value.empty()) return Status::Ok();
  std::vector<std::string> add;
  if (!comment.empty()) add.push_back(std::string(child, ' ') + comment);
  add.push_back(std::string(child, ' ') + key + ": " + value);
  lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(last + 1), add.begin(), add.end());
  return Status::Ok();
}

bool Same(const YAML::Node& a, const YAML::Node& b) {
  if (a.Type() != b.Type()) return false;
  switch (a.Type()) {
    case YAML::NodeType::Scalar:
      return a.Scalar() == b.Scalar() && a.Tag() == b.Tag();
    case YAML::NodeType::Sequence:
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!Same(a[i], b[i])) return false;
      return true;
    case YAML::NodeType::Map: {
      if (a.size() != b.size()) return false;
      auto ib = b.begin();
      for (auto ia = a.begin(); ia != a.end(); ++ia, ++ib)
        if (!Same(ia->first, ib->first) || !Same(ia->second, ib->second)) return false;
      return true;
    }
    default:
      return true;
  }
}

// `root` without `section.key` (a copy).
YAML::Node Without(const YAML::Node& root, const std::string& section, const std::string& key) {
  YAML::Node out(YAML::NodeType::Map);
  if (!root.IsMap()) return YAML::Clone(root);
  for (const auto& kv : root) {
    if (kv.first.Scalar() != section || !kv.second.IsMap()) {
      out[kv.first.Scalar()] = YAML::Clone(kv.second);
      continue;
    }
    YAML::Node inner(YAML::NodeType::Map);
    for (const auto& in : kv.second)
      if (in.first.Scalar() != key) inner[in.first.Scalar()] = YAML::Clone(in.second);
    out[kv.first.Scalar()] = inner;
  }
  return out;
}

}  // namespace

StatusOr<std::string> MergeCkptIntoYaml(const std::string& text, const std::string& path,
                                        const std::string& target_yaml, const std::string& note) {
  const std::string source = "--merge-into " + path + ": ";
  if (std::string problem = StrictYamlProblem(text); !problem.empty())
    return Error(source + problem);
  try {
    const YAML::Node before = YAML::Load(text);
    if (!before.IsDefined() || !(before.IsMap() || before.IsNull()))
      return Error(source + "the file is not an llm-foundry training YAML (a mapping)");
    for (const char* section : {"model", "fsdp_config"})
      if (before.IsMap() && before[section].IsDefined() && !before[section].IsNull() &&
          !before[section].IsMap())
        return Error(source + "'" + section + "' is not a mapping");
    std::vector<std::string> lines = Lines(text);
    RETURN_IF_ERROR(
        SetKey(lines, path, "model", "activation_checkpointing_target", target_yaml, note));
    RETURN_IF_ERROR(SetKey(lines, path, "fsdp_config", "activation_checkpointing",
                           target_yaml.empty() ? "false" : "true", note));
    std::string merged;
    for (const auto& l : lines) merged += l + "\n";
    // The proof: the two keys as asked, every other node as it was.
    const YAML::Node after = YAML::Load(merged);
    const YAML::Node model = after["model"];
    const YAML::Node fsdp = after["fsdp_config"];
    bool ok = after.IsMap() && fsdp.IsMap() && fsdp["activation_checkpointing"].IsScalar() &&
              fsdp["activation_checkpointing"].Scalar() == (target_yaml.empty() ? "false" : "true");
    if (ok && !target_yaml.empty())
      ok = model.IsMap() && Same(model["activation_checkpointing_target"], YAML::Load(target_yaml));
    if (ok && target_yaml.empty())
      ok = !model.IsMap() || !model["activation_checkpointing_target"].IsDefined();
    if (ok) {
      YAML::Node a = Without(Without(before.IsNull() ? YAML::Node(YAML::NodeType::Map) : before,
                                     "model", "activation_checkpointing_target"),
                             "fsdp_config", "activation_checkpointing");
      YAML::Node b = Without(Without(after, "model", "activation_checkpointing_target"),
                             "fsdp_config", "activation_checkpointing");
      // Sections the merge created hold nothing else.
      for (const char* section : {"model", "fsdp_config"})
        if (b[section].IsDefined() && b[section].size() == 0 && !a[section].IsDefined())
          b.remove(section);
      ok = Same(a, b);
    }
    if (!ok)
      return Error(source +
                   "the merged file would change more than the two checkpointing keys (the "
                   "sections are not laid out as foundry can edit line by line); set "
                   "model.activation_checkpointing_target and fsdp_config."
                   "activation_checkpointing by hand");
    return merged;
  } catch (const YAML::ParserException& e) {
    return Error(source + "YAML syntax error at line " + std::to_string(e.mark.line + 1) +
                 ", column " + std::to_string(e.mark.column + 1) + ": " + Clip(e.msg));
  } catch (const YAML::Exception& e) {
    return Error(source + "cannot read the file: " + Clip(e.msg));
  }
}

}  // namespace foundry
