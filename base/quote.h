// Names from input files in messages. A file may name a node "a\nb" or put bytes that are not
// UTF-8 in a name; printed raw they split an error over lines, corrupt a terminal, or abort a
// JSON writer.
#pragma once

#include <string>
#include <string_view>

namespace foundry {

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool IsValidUtf8(std::string_view s);

// `s` with control characters (U+0000-U+001F, U+007F) and bytes that are not part of well-formed
// UTF-8 written as \xNN, and '\' as \\; everything else (printable ASCII, valid multi-byte UTF-8)
// unchanged.
std::string EscapeName(std::string_view s);

// EscapeName(s) in single quotes: 'blocks.0/attn', 'a\x0ab'.
std::string QuoteName(std::string_view s);

// `s` as a message may quote it: whole up to `max` bytes, else its first `max` bytes (never
// half a UTF-8 character) and "... (N bytes)". A 10 MB name makes a line of a few hundred bytes.
std::string Clip(std::string_view s, size_t max = 200);

}  // namespace foundry
