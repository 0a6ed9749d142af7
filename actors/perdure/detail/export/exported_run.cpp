#include "perdure/detail/export/exported_run.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <limits>
#include <optional>
#include <set>

#include "perdure/error.hpp"
#include "perdure/persistence/codec.hpp"

namespace perdure::detail {

namespace {

constexpr const char* format = "perdure-run/1";

constexpr std::string_view alphabet
  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  auto byte = [&](std::size_t k) {
    return static_cast<std::uint32_t>(static_cast<unsigned char>(in[k]));
  };
  for (; i + 2 < in.size(); i += 3) {
    auto n = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
    for (int s = 18; s >= 0; s -= 6)
      out += alphabet[(n >> s) & 63];
  }
  if (auto rest = in.size() - i; rest > 0) {
    auto n = byte(i) << 16 | (rest == 2 ? byte(i + 1) << 8 : 0);
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += rest == 2 ? alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string unbase64(const std::string& in, const std::string& what) {
  std::array<int, 256> value;
  value.fill(-1);
  for (std::size_t k = 0; k < alphabet.size(); ++k)
    value[static_cast<unsigned char>(alphabet[k])] = static_cast<int>(k);
  std::string out;
  std::uint32_t n = 0;
  int bits = 0;
  for (auto c : in) {
    if (c == '=')
      break;
    auto v = value[static_cast<unsigned char>(c)];
    if (v < 0)
      throw perdure::error(errc::invalid_argument,
                           "malformed export: " + what + " is not base64");
    n = n << 6 | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((n >> bits) & 0xff);
    }
  }
  return out;
}

/// Writes `bytes` under `key` as text if they are UTF-8 text, else as
/// `<key>_base64` (a binary payload, say).
void put_bytes(nlohmann::json& j, const std::string& key,
               const std::string& bytes) {
  nlohmann::json text = bytes;
  try {
    (void)text.dump(); // strict: throws on bytes that are not UTF-8
    if (bytes.empty() || bytes[0] != persistence::detail::binary_tag) {
      j[key] = std::move(text);
      return;
    }
  } catch (const nlohmann::json::exception&) {
  }
  j[key + "_base64"] = base64(bytes);
}

std::string get_bytes(const nlohmann::json& j, const std::string& key,
                      const std::string& what) {
  if (auto i = j.find(key); i != j.end())
    return i->get<std::string>();
  if (auto i = j.find(key + "_base64"); i != j.end())
    return unbase64(i->get<std::string>(), what);
  return {};
}

/// The integer at `key` of `j` (`fallback` if absent); a float or another
/// type is malformed (never converted).
std::int64_t integer(const nlohmann::json& j, const std::string& key,
                     std::optional<std::int64_t> fallback = std::nullopt) {
  auto i = j.find(key);
  if (i == j.end()) {
    if (fallback)
      return *fallback;
    throw perdure::error(errc::invalid_argument,
                         "malformed run export: no '" + key + "'");
  }
  if (!i->is_number_integer())
    throw perdure::error(errc::invalid_argument,
                         "malformed run export: '" + key
                           + "' is not an integer");
  if (i->is_number_unsigned()
      && i->get<std::uint64_t>()
           > static_cast<std::uint64_t>(
             std::numeric_limits<std::int64_t>::max()))
    throw perdure::error(errc::invalid_argument,
                         "malformed run export: '" + key + "' is too large");
  return i->get<std::int64_t>();
}

} // namespace

std::string to_json(const exported_run& run) {
  nlohmann::json j;
  j["format"] = format;
  j["id"] = run.id;
  j["workflow"] = run.workflow;
  j["status"] = run.status;
  j["app_version"] = run.app_version;
  j["exported_at_ms"] = run.exported_at_ms;
  j["cancel_requested"] = run.cancel_requested;
  put_bytes(j, "inputs", run.inputs);
  auto& journal = j["journal"] = nlohmann::json::array();
  for (auto& e : run.journal) {
    nlohmann::json row;
    row["seq"] = e.seq;
    row["kind"] = persistence::to_string(e.kind);
    row["name"] = e.name;
    row["outcome"] = static_cast<int>(e.outcome);
    put_bytes(row, "payload", e.payload);
    if (!e.error.empty())
      put_bytes(row, "error", e.error);
    row["at_ms"] = e.created_at_ms;
    journal.push_back(std::move(row));
  }
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

exported_run from_json(const std::string& text) {
  exported_run run;
  try {
    auto j = nlohmann::json::parse(text);
    if (j.value("format", std::string{}) != format)
      throw perdure::error(errc::invalid_argument,
                           std::string{"not a Perdure run export (format "}
                             + format + "): export it with "
                               "client::export_run");
    run.id = j.at("id").get<std::string>();
    run.workflow = j.at("workflow").get<std::string>();
    run.status = j.value("status", std::string{});
    run.app_version = j.value("app_version", std::string{});
    run.exported_at_ms = integer(j, "exported_at_ms", 0);
    run.cancel_requested = j.value("cancel_requested", false);
    run.inputs = get_bytes(j, "inputs", "inputs");
    std::set<std::int64_t> seen;
    for (auto& row : j.at("journal")) {
      auto seq = integer(row, "seq");
      // Indexes a run can have: the writer numbers them in int32, and one
      // past the last must exist (an attempt marker's next).
      if (seq < std::numeric_limits<std::int32_t>::min()
          || seq >= std::numeric_limits<std::int32_t>::max())
        throw perdure::error(errc::invalid_argument,
                             "malformed run export: journal index "
                               + std::to_string(seq) + " is out of range");
      if (!seen.insert(seq).second)
        throw perdure::error(errc::invalid_argument,
                             "malformed run export: journal index "
                               + std::to_string(seq) + " appears twice");
      auto where = "journal index " + std::to_string(seq);
      run.journal.push_back(persistence::read_journal_row(
        run.id, seq, row.at("kind").get<std::string>(),
        row.at("name").get<std::string>(), integer(row, "outcome"),
        get_bytes(row, "payload", where), get_bytes(row, "error", where),
        integer(row, "at_ms", 0)));
    }
  } catch (const nlohmann::json::exception& ex) {
    throw perdure::error(errc::invalid_argument,
                         std::string{"malformed run export: "} + ex.what());
  }
  return run;
}

} // namespace perdure::detail
