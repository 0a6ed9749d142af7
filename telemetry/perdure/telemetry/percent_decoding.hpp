#pragma once

// `%XX` decoding (RFC 3986 §2.1), shared by what reads percent-encoded
// text: the OTEL_* list values (`Authorization=Basic%20...`) and the admin
// API's path segments. Here, in the lowest target, so both use one.

#include <string>
#include <string_view>

namespace perdure::telemetry {

/// `text` with each `%XX` (two hex digits, either case) replaced by its
/// byte; a `%` not followed by two hex digits stays as it is.
std::string percent_decoded(std::string_view text);

} // namespace perdure::telemetry
