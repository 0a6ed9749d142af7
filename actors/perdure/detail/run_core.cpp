#include "perdure/detail/run_core.hpp"

#include <algorithm>
#include <limits>

#include "perdure/cancelled_error.hpp"
#include "perdure/error.hpp"

namespace perdure::detail {

bool run_core::replaying(std::int32_t seq, persistence::entry_kind kind,
                         const std::string& name) {
  auto* found = find_recorded(seq);
  if (!found)
    return false;
  auto& e = *found;
  if (e.kind != kind || e.name != name) {
    std::string msg = "non-determinism in run '" + run_id_
                      + "' at journal index " + std::to_string(seq)
                      + ": the code now runs " + to_string(kind) + " '" + name
                      + "' but the journal recorded " + to_string(e.kind)
                      + " '" + e.name + "'";
    fatal_ = std::make_unique<std::string>(msg);
    diverged_ = true;
    diverged(seq, kind, name, e);
    throw perdure::error(errc::non_determinism, msg);
  }
  return true;
}

run_core::patch_decision run_core::patched(const std::string& name) {
  if (!declares_patch(name))
    throw perdure::error(
      errc::invalid_argument,
      "patch '" + name + "' is not declared for this workflow: list it in "
        "workflow_options::patches where the workflow is registered (an "
        "object's handler: handler_options::patches; a process claims only "
        "runs whose patches it declares)");
  auto at = peek_seq();
  std::int32_t taken = 0;
  if (patches_) {
    for (auto& [patch, before] : *patches_)
      if (patch == name && before == at)
        return {true, std::nullopt};
    taken = static_cast<std::int32_t>(patches_->size());
  }
  if (find_recorded(at))
    return {false, std::nullopt}; // passed here under code without it
  operation marker;
  marker.seq = -2 - taken; // markers are durable in order: no gaps
  marker.kind = persistence::entry_kind::patch;
  marker.name = name;
  marker.payload = std::to_string(at);
  return {true, std::move(marker)};
}

void run_core::took_patch(persistence::journal_entry e) {
  if (!patches_)
    patches_ = std::make_unique<patch_list>();
  try {
    patches_->emplace_back(std::move(e.name), std::stoi(e.payload));
  } catch (const std::exception&) {
    fatal_ = std::make_unique<std::string>(
      "malformed patch marker at journal index " + std::to_string(e.seq));
  }
}

wait_outcome wait_outcome::decode(const persistence::journal_entry& e) {
  wait_outcome w;
  w.result = e.outcome;
  w.error = e.error;
  auto a = e.payload.find(':');
  auto b = a == std::string::npos ? a : e.payload.find(':', a + 1);
  if (b == std::string::npos)
    throw perdure::error(errc::store_error,
                         "malformed wait entry at journal index "
                           + std::to_string(e.seq));
  w.index = static_cast<std::int32_t>(std::stol(e.payload.substr(0, a)));
  w.cursor = std::stoll(e.payload.substr(a + 1, b - a - 1));
  w.payload = e.payload.substr(b + 1);
  return w;
}

std::int32_t run_core::peek_seq() const noexcept {
  auto seq = next_seq_;
  if (jumps_)
    for (bool jumped = true; jumped;) {
      jumped = false;
      for (auto& [from, to] : *jumps_)
        if (seq == from && from != to) {
          seq = to;
          jumped = true;
        }
    }
  return seq;
}

std::int32_t run_core::next_seq_jumping() noexcept {
  next_seq_ = peek_seq();
  return next_seq_++;
}

void run_core::load_journal(std::vector<persistence::journal_entry> journal) {
  load_attempts(journal); // a queue item's retries, a resumed run
  for (auto& e : journal) {
    if (e.outcome == persistence::outcome::unreadable && !fatal_)
      fatal_ = std::make_unique<std::string>(e.error); // ends it ERROR
    std::string{}.swap(e.run_id); // the run's id is run_id_; save the copy
    record_outcome(std::move(e));
  }
}

std::optional<persistence::journal_entry>
run_core::take_carried(const std::string& name) {
  if (!carried_)
    return std::nullopt;
  auto i = carried_->find(name);
  if (i == carried_->end() || i->second.empty())
    return std::nullopt;
  auto e = std::move(i->second.front());
  i->second.pop_front();
  return e;
}

void run_core::load_attempts(std::vector<persistence::journal_entry>& journal) {
  // Each marker (from, to): the attempt after it forgot indexes from
  // `from` on and goes on at `to`. What the latest attempt replays is
  // what is left of [0, end) once every marker cut it, in order.
  std::vector<std::pair<std::int32_t, std::int32_t>> markers;
  for (auto& e : journal)
    if (e.kind == persistence::entry_kind::phase && e.name == "attempt") {
      try {
        markers.emplace_back(std::stoi(e.payload), e.seq + 1);
      } catch (const std::exception&) {
        fatal_ = std::make_unique<std::string>(
          "malformed attempt marker at journal index " + std::to_string(e.seq));
      }
    }
  if (markers.empty())
    return;
  std::sort(markers.begin(), markers.end(),
            [](auto& a, auto& b) { return a.second < b.second; });
  constexpr auto end = std::numeric_limits<std::int32_t>::max();
  std::vector<std::pair<std::int32_t, std::int32_t>> path{{0, end}};
  for (auto [from, to] : markers) {
    std::vector<std::pair<std::int32_t, std::int32_t>> cut;
    for (auto [a, b] : path)
      if (a < std::min(b, from))
        cut.emplace_back(a, std::min(b, from));
    cut.emplace_back(to, end);
    path = std::move(cut);
  }
  jumps_ = std::make_unique<std::vector<std::pair<std::int32_t, std::int32_t>>>();
  std::int32_t at = 0;
  for (auto [a, b] : path) {
    if (a != at)
      jumps_->emplace_back(at, a);
    at = b;
  }
  auto live = [&](std::int32_t seq) {
    return std::any_of(path.begin(), path.end(),
                       [&](auto& r) { return seq >= r.first && seq < r.second; });
  };
  std::vector<persistence::journal_entry> replayed;
  for (auto& e : journal) {
    if (e.seq < 0 || live(e.seq)) { // patch markers are outside the indexes
      replayed.push_back(std::move(e));
    } else if (e.kind == persistence::entry_kind::transaction
               && e.outcome == persistence::outcome::value) {
      if (!carried_)
        carried_ = std::make_unique<std::unordered_map<
          std::string, std::deque<persistence::journal_entry>>>();
      auto name = e.name;
      (*carried_)[name].push_back(std::move(e));
    }
  }
  journal = std::move(replayed);
}

persistence::journal_entry run_core::take(std::int32_t seq) {
  auto* found = find_recorded(seq);
  if (!found)
    throw perdure::error(errc::store_error, "no outcome for journal index "
                                              + std::to_string(seq));
  auto e = std::move(*found);
  recorded_->erase(seq);
  if (recorded_->empty())
    recorded_.reset();
  if (e.outcome == persistence::outcome::cancelled)
    throw cancelled_error(e.error.empty() ? "cancelled" : e.error);
  return e;
}

} // namespace perdure::detail
