// A strict reader for the XML subset the SVG pictures are written in, shared by their tests.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace foundry {

// Declaration, elements, attributes, text, the five predefined entities: an error at the first
// thing a browser's parser would reject, or one whose root is not <svg>. Returns the element
// names in document order.
StatusOr<std::vector<std::string>> ParseXml(std::string_view doc);

}  // namespace foundry
