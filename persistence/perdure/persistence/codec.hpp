#pragma once

// Payload encoding. Users make a type storable by giving it a cereal
// `serialize()` (or save/load); nothing else. The default encoding is compact
// JSON so `psql` shows readable payloads; binary is selectable for speed.
// Every payload is self-describing (binary ones start with a tag byte), so a
// store may hold both and switching the encoding never strands old data.

#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>

#include "perdure/persistence/detail/bounded_binary_archive.hpp"

#include <cereal/types/array.hpp>
#include <cereal/types/chrono.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/set.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/unordered_map.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/variant.hpp>
#include <cereal/types/vector.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "perdure/error.hpp"

namespace perdure::persistence {

/// How payloads are written. Reading accepts both.
enum class encoding : std::uint8_t {
  json,
  binary,
};

namespace detail {

/// First byte of a binary payload; JSON never starts with it.
inline constexpr char binary_tag = '\x01';

} // namespace detail

/// Returns `x` encoded as `enc`.
template <class T>
std::string encode(const T& x, encoding enc = encoding::json) {
  std::ostringstream out;
  if (enc == encoding::binary) {
    out.put(detail::binary_tag);
    cereal::PortableBinaryOutputArchive archive{out};
    archive(x);
  } else {
    // The archive completes the document when it goes out of scope.
    cereal::JSONOutputArchive archive{
      out, cereal::JSONOutputArchive::Options::NoIndent()};
    archive(cereal::make_nvp("value", x));
  }
  auto result = std::move(out).str();
  if (enc == encoding::json) {
    // rapidjson escapes newlines inside strings, so every raw newline is
    // layout: drop it for one-line payloads.
    std::erase(result, '\n');
    // cereal reads JSON strings as C strings: an embedded NUL would come back
    // truncated. Such payloads take the binary encoding instead (decoding is
    // self-describing, so nothing else needs to know).
    if (result.find("\\u0000") != std::string::npos)
      return encode(x, encoding::binary);
  }
  return result;
}

/// Returns the value encoded in `bytes`. Throws `perdure::error` with
/// `errc::decode_failed` if `bytes` does not hold a `T`.
template <class T>
T decode(std::string_view bytes) {
  T result{};
  try {
    if (!bytes.empty() && bytes.front() == detail::binary_tag) {
      detail::bounded_binary_input_archive archive{bytes.substr(1)};
      archive(result);
      if (archive.remaining() != 0)
        throw std::runtime_error("trailing bytes");
    } else {
      std::istringstream in{std::string{bytes}};
      cereal::JSONInputArchive archive{in};
      archive(cereal::make_nvp("value", result));
    }
  } catch (const std::exception& ex) {
    throw perdure::error(errc::decode_failed,
                         std::string{"cannot decode payload: "} + ex.what());
  }
  return result;
}

} // namespace perdure::persistence
