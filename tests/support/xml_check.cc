#include "tests/support/xml_check.h"

#include <cctype>

namespace foundry {

StatusOr<std::vector<std::string>> ParseXml(std::string_view doc) {
  std::vector<std::string> open, names;
  size_t i = 0;
  auto at = [&](size_t k) { return "at byte " + std::to_string(k); };
  auto check_text = [&](std::string_view text, size_t base) -> Status {
    for (size_t k = 0; k < text.size(); ++k) {
      if (text[k] == '<') return Error("'<' in text or attribute " + at(base + k));
      if (text[k] != '&') continue;
      bool ok = false;
      for (std::string_view e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
        ok = ok || text.substr(k, e.size()) == e;
      if (!ok) return Error("bare '&' " + at(base + k));
    }
    return Status::Ok();
  };
  if (doc.substr(0, 5) == "<?xml") {
    i = doc.find("?>");
    if (i == std::string_view::npos) return Error("unterminated declaration");
    i += 2;
  }
  bool root_closed = false;
  while (i < doc.size()) {
    size_t lt = doc.find('<', i);
    std::string_view text = doc.substr(i, lt == std::string_view::npos ? doc.npos : lt - i);
    if (open.empty() && text.find_first_not_of(" \n\r\t") != std::string_view::npos)
      return Error("text outside the root " + at(i));
    RETURN_IF_ERROR(check_text(text, i));
    if (lt == std::string_view::npos) break;
    size_t gt = doc.find('>', lt);
    if (gt == std::string_view::npos) return Error("unterminated tag " + at(lt));
    std::string_view tag = doc.substr(lt + 1, gt - lt - 1);
    i = gt + 1;
    if (tag.starts_with("/")) {
      std::string name(tag.substr(1));
      if (open.empty() || open.back() != name)
        return Error("</" + name + "> does not close " + (open.empty() ? "anything" : open.back()));
      open.pop_back();
      root_closed = open.empty();
      continue;
    }
    if (root_closed) return Error("a second root element " + at(lt));
    const bool self_closing = tag.ends_with("/");
    if (self_closing) tag.remove_suffix(1);
    size_t k = 0;
    while (k < tag.size() && !std::isspace(static_cast<unsigned char>(tag[k]))) ++k;
    std::string name(tag.substr(0, k));
    if (name.empty()) return Error("an element without a name " + at(lt));
    names.push_back(name);
    // Attributes: name="value", each name once.
    std::vector<std::string> attrs;
    while (true) {
      while (k < tag.size() && std::isspace(static_cast<unsigned char>(tag[k]))) ++k;
      if (k == tag.size()) break;
      size_t eq = tag.find('=', k);
      if (eq == std::string_view::npos || tag[eq + 1] != '"')
        return Error("attribute without =\"...\" in <" + name + "> " + at(lt));
      std::string attr(tag.substr(k, eq - k));
      for (const auto& a : attrs)
        if (a == attr) return Error("attribute " + attr + " twice in <" + name + ">");
      attrs.push_back(attr);
      size_t close = tag.find('"', eq + 2);
      if (close == std::string_view::npos) return Error("unterminated attribute " + attr);
      RETURN_IF_ERROR(check_text(tag.substr(eq + 2, close - eq - 2), lt + 1 + eq + 2));
      k = close + 1;
      if (k < tag.size() && !std::isspace(static_cast<unsigned char>(tag[k])))
        return Error("no space after attribute " + attr + " in <" + name + ">");
    }
    if (!self_closing) open.push_back(name);
    root_closed = open.empty();
  }
  if (!open.empty()) return Error("<" + open.back() + "> is never closed");
  if (names.empty() || names[0] != "svg") return Error("the root is not <svg>");
  return names;
}

}  // namespace foundry
