// The character rules every intake applies to what a producer names (HTTP API, NDJSON bulk,
// the message bus): one definition, so no intake accepts what another refuses. Pure.
#pragma once

#include <cstddef>
#include <string_view>

namespace ringcast {

// 1..max characters of A-Z a-z 0-9 - _ . : @ ~ +
bool valid_tenant(std::string_view t, size_t max);
// No control characters (ids, free text).
bool printable_text(std::string_view s);
// Printable ASCII without spaces (event types; the length is the caller's).
bool valid_type(std::string_view t);
// An e-mail address for an SMTP envelope and a To: header (SPEC R8.4): local@domain, at most
// 254 bytes, a local part of 1-64 printable ASCII characters without spaces or any of
// "(),:;<>@[\]", a domain of dot-separated labels of A-Z a-z 0-9 and inner hyphens. Nothing
// that could end a header line or an SMTP command gets through.
bool valid_email(std::string_view s);

}  // namespace ringcast
