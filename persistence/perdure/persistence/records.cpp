#include "perdure/persistence/records.hpp"

#include <charconv>
#include <cstdint>

#include "perdure/error.hpp"

namespace perdure::persistence {

bool claim_filter::admits(const std::string& name, const std::string& version,
                          std::string_view patches) const {
  if (!admits(name, version))
    return false;
  while (!patches.empty()) {
    auto end = patches.find('\x1f');
    auto known = name + '\x1e' + std::string{patches.substr(0, end)};
    if (std::find(names.begin(), names.end(), known) == names.end())
      return false;
    patches.remove_prefix(end == std::string_view::npos ? patches.size()
                                                        : end + 1);
  }
  return true;
}

bool object_claim_filter::admits(std::string_view type,
                                 std::string_view handler,
                                 std::string_view version) const {
  auto& names = handlers(type);
  return (version.empty() || version == app_version)
         && std::find(names.begin(), names.end(), handler) != names.end();
}

bool object_claim_filter::admits(const run_record& run) const {
  return admits(run.object_type, run.name, run.app_version);
}

const char* to_string(entry_kind x) noexcept {
  switch (x) {
    case entry_kind::step: return "step";
    case entry_kind::transaction: return "transaction";
    case entry_kind::sleep: return "sleep";
    case entry_kind::deadline: return "deadline";
    case entry_kind::child: return "child";
    case entry_kind::event: return "event";
    case entry_kind::awakeable: return "awakeable";
    case entry_kind::await: return "await";
    case entry_kind::send: return "send";
    case entry_kind::resolve: return "resolve";
    case entry_kind::phase: return "phase";
    case entry_kind::patch: return "patch";
  }
  return "unknown";
}

std::optional<entry_kind> parse_entry_kind(const std::string& str) noexcept {
  if (str == "step")
    return entry_kind::step;
  if (str == "transaction")
    return entry_kind::transaction;
  if (str == "sleep")
    return entry_kind::sleep;
  if (str == "deadline")
    return entry_kind::deadline;
  if (str == "child")
    return entry_kind::child;
  if (str == "event")
    return entry_kind::event;
  if (str == "awakeable")
    return entry_kind::awakeable;
  if (str == "await")
    return entry_kind::await;
  if (str == "send")
    return entry_kind::send;
  if (str == "resolve")
    return entry_kind::resolve;
  if (str == "phase")
    return entry_kind::phase;
  if (str == "patch")
    return entry_kind::patch;
  return std::nullopt;
}

namespace {

/// Parses a whole decimal int64, or nothing.
std::optional<std::int64_t> parse_int(std::string_view str) {
  std::int64_t x = 0;
  auto [end, ec] = std::from_chars(str.data(), str.data() + str.size(), x);
  if (ec != std::errc{} || end != str.data() + str.size())
    return std::nullopt;
  return x;
}

/// Returns whether a wait entry's payload has its form,
/// `<index>:<cursor>:<bytes>`.
bool valid_wait_payload(const std::string& payload) {
  auto a = payload.find(':');
  if (a == std::string::npos)
    return false;
  auto b = payload.find(':', a + 1);
  return b != std::string::npos
         && parse_int(std::string_view{payload}.substr(0, a))
         && parse_int(std::string_view{payload}.substr(a + 1, b - a - 1));
}

} // namespace

journal_entry read_journal_row(std::string run_id, std::int64_t seq,
                               const std::string& kind, std::string name,
                               std::int64_t stored_outcome,
                               std::string payload, std::string error,
                               std::int64_t created_at_ms) {
  journal_entry e;
  e.run_id = std::move(run_id);
  e.seq = static_cast<std::int32_t>(seq);
  e.name = std::move(name);
  e.payload = std::move(payload);
  e.error = std::move(error);
  e.created_at_ms = created_at_ms;
  auto row = [&] {
    return "journal row (run '" + e.run_id + "', seq " + std::to_string(seq)
           + ")";
  };
  auto parsed = parse_entry_kind(kind);
  std::string defect;
  if (!parsed)
    defect = row() + " has an unknown kind '" + kind + "'";
  else if (stored_outcome < 0 || stored_outcome > 2)
    defect = row() + " has an unknown outcome " + std::to_string(stored_outcome);
  else if ((seq < 0) != (parsed == entry_kind::patch) || seq > INT32_MAX
           || seq < INT32_MIN)
    defect = row() + " has an index out of range"; // patches: negative
  if (parsed) {
    e.kind = *parsed;
    if (defect.empty() && stored_outcome == 0) {
      auto timed = e.kind == entry_kind::sleep || e.kind == entry_kind::deadline;
      if (timed && !parse_int(e.payload))
        defect = row() + " has a malformed wake-up time";
      else if (e.kind == entry_kind::await && !valid_wait_payload(e.payload))
        defect = row() + " has a malformed wait outcome";
    }
  }
  if (!defect.empty()) {
    e.outcome = outcome::unreadable;
    e.error = std::move(defect);
    return e;
  }
  e.outcome = static_cast<outcome>(stored_outcome);
  return e;
}

std::int64_t recorded_time(const journal_entry& e) {
  auto t = parse_int(e.payload);
  return t ? *t : 0; // read_journal_row refused malformed ones
}

void delivery::settle(journal_entry& checkpoint,
                      resolve_result stored) const {
  switch (stored) {
    case resolve_result::resolved:
      checkpoint.outcome = outcome::value;
      return;
    case resolve_result::unknown_id:
      checkpoint.error = "no " + target;
      break;
    case resolve_result::already_resolved:
      checkpoint.error = target + " was already resolved or rejected";
      break;
  }
  checkpoint.outcome = outcome::terminal;
}

std::chrono::system_clock::time_point from_ms(std::int64_t ms) {
  return std::chrono::system_clock::time_point{std::chrono::milliseconds{ms}};
}

namespace {

std::int64_t to_ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           t.time_since_epoch())
    .count();
}

} // namespace

listing_query listing_query::from(const run_filter& f) {
  if (f.limit < 1 || f.limit > 1000)
    throw perdure::error(errc::invalid_argument,
                         "list_runs: limit must be 1 to 1000 (got "
                           + std::to_string(f.limit) + ")");
  listing_query q;
  q.limit = static_cast<std::int64_t>(f.limit);
  if (f.status) {
    q.status = std::string{to_string(*f.status)};
    q.stored_status = *f.status == run_status::compensating
                        ? std::string{to_string(run_status::pending)}
                        : *q.status;
  }
  q.name = f.name;
  if (f.created_after)
    q.after = to_ms(*f.created_after);
  if (f.created_before)
    q.before = to_ms(*f.created_before);
  if (f.ended_after)
    q.ended_after = to_ms(*f.ended_after);
  if (f.ended_before)
    q.ended_before = to_ms(*f.ended_before);
  q.unended = f.unended;
  q.app_version = f.app_version;
  q.executor = f.executor;
  q.parent_id = f.parent_id;
  q.queue = f.queue;
  q.object_type = f.object_type;
  q.object_key = f.object_key;
  if (f.id_prefix && !f.id_prefix->empty())
    q.id_prefix = f.id_prefix;
  if (!f.cursor.empty()) {
    // <created_at ms>:<run id>, as `finish` wrote it.
    auto colon = f.cursor.find(':');
    auto digits = f.cursor.substr(0, colon);
    if (colon == std::string::npos || digits.empty() || digits.size() > 18
        || colon + 1 == f.cursor.size()
        || digits.find_first_not_of("0123456789") != std::string::npos)
      throw perdure::error(errc::invalid_argument,
                           "list_runs: not a cursor a page returned");
    q.cursor_at = std::stoll(digits);
    q.cursor_id = f.cursor.substr(colon + 1);
  }
  return q;
}

void listing_query::finish(run_page& page) const {
  if (page.runs.size() < static_cast<std::size_t>(limit))
    return;
  auto& last = page.runs.back();
  page.next_cursor = std::to_string(to_ms(last.created_at)) + ":" + last.id;
}

write_batch::slot write_batch::add(write w) {
  auto kind = w.index();
  auto push = [&](auto& list, auto&& x) {
    list.push_back(std::move(x));
    return slot{kind, list.size() - 1};
  };
  return std::visit(
    [&](auto&& x) -> slot {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, run_record>)
        return push(creates, x);
      else if constexpr (std::is_same_v<T, append_write>)
        return push(appends, x);
      else if constexpr (std::is_same_v<T, completion_write>)
        return push(completions, x);
      else
        return push(invocations, x);
    },
    std::move(w));
}

write_batch write_batch::single(slot s) const {
  write_batch one;
  switch (s.kind) {
    case kind_of<run_record>(): one.creates.push_back(creates.at(s.index)); break;
    case kind_of<append_write>(): one.appends.push_back(appends.at(s.index)); break;
    case kind_of<completion_write>():
      one.completions.push_back(completions.at(s.index));
      break;
    case kind_of<invocation_commit>():
      one.invocations.push_back(invocations.at(s.index));
      break;
  }
  return one;
}

bool batch_result::took_effect(write_batch::slot s) const {
  switch (s.kind) {
    case kind_of<run_record>(): return created.at(s.index);
    case kind_of<append_write>(): return appends.at(s.index);
    case kind_of<completion_write>(): return completions.at(s.index);
    case kind_of<invocation_commit>(): return invocations.at(s.index);
  }
  return false;
}

} // namespace perdure::persistence
