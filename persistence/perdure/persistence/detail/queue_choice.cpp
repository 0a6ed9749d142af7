#include "perdure/persistence/detail/queue_choice.hpp"

#include <algorithm>
#include <tuple>
#include <unordered_set>

namespace perdure::persistence::detail {

std::int64_t rate_window_ms(const queue_claim_request& req) {
  if (!req.queue.rate_limit)
    return 0;
  return req.queue.rate_period_ms + req.rate_margin_ms;
}

bool shares_limits(const queue_definition& q) {
  return q.concurrency || q.partition_concurrency || q.rate_limit;
}

std::int64_t heads_per_partition(const queue_claim_request& req) {
  std::int64_t n = req.capacity; // at most this many are idle
  if (req.queue.partition_concurrency)
    n = std::min<std::int64_t>(n, *req.queue.partition_concurrency);
  return std::max<std::int64_t>(n, 1);
}

queue_choice choose_claims(const queue_claim_request& req,
                           const queue_load& load,
                           const std::vector<queue_candidate>& candidates) {
  queue_choice out;
  std::int64_t room = req.capacity;
  if (req.queue.concurrency) {
    auto left = *req.queue.concurrency - load.running;
    if (left < room && !candidates.empty())
      out.concurrency_bound = true;
    room = std::min(room, left);
  }
  if (req.queue.rate_limit) {
    auto left = *req.queue.rate_limit - load.recent_starts;
    if (left < room && !candidates.empty()) {
      // The oldest start leaves the window first; one can go then.
      auto oldest = load.oldest_recent_start.value_or(load.db_now_ms);
      out.rate_wait_ms = std::max<std::int64_t>(
        1, oldest + rate_window_ms(req) - load.db_now_ms);
    }
    room = std::min(room, left);
  }
  out.room = std::max<std::int64_t>(room, 0);
  if (room <= 0)
    return out;
  // With a partition limit, partitions take turns: the k-th ready item of
  // every partition before the (k+1)-th of any; within one round, by the
  // order read (priority, then age). Without one, just that order.
  struct ranked {
    std::size_t rank;
    std::size_t pos;
  };
  std::vector<ranked> order;
  std::unordered_map<std::string, std::size_t> seen;
  auto turns = req.queue.partition_concurrency.has_value();
  for (std::size_t i = 0; i < candidates.size(); ++i)
    order.push_back({turns ? seen[candidates[i].partition_key]++ : 0, i});
  std::stable_sort(order.begin(), order.end(),
                   [](const ranked& a, const ranked& b) {
                     return a.rank < b.rank;
                   });
  std::unordered_map<std::string, std::int64_t> taken;
  for (auto& r : order) {
    if (static_cast<std::int64_t>(out.ids.size()) >= room)
      break;
    auto& c = candidates[r.pos];
    if (!req.filter.admits(c.name, c.app_version))
      continue;
    if (req.queue.partition_concurrency) {
      auto i = load.running_by_partition.find(c.partition_key);
      auto running = i == load.running_by_partition.end() ? 0 : i->second;
      if (running + taken[c.partition_key] >= *req.queue.partition_concurrency) {
        out.concurrency_bound = true;
        continue;
      }
    }
    ++taken[c.partition_key];
    out.ids.push_back(c.id);
    out.fresh.push_back(c.fresh);
  }
  return out;
}

std::int64_t first_ready_to_read(const queue_claim_request& req) {
  auto n = std::max<std::int64_t>(req.capacity, 1);
  return req.queue.partition_concurrency ? 4 * n : n;
}

namespace {

/// Whether `choice` takes at most one item of each partition.
bool one_per_partition(const queue_choice& choice,
                       const std::vector<queue_candidate>& candidates) {
  std::unordered_map<std::string, const std::string*> partition_of;
  for (auto& c : candidates)
    partition_of.emplace(c.id, &c.partition_key);
  std::unordered_set<std::string> partitions;
  for (auto& id : choice.ids)
    if (!partitions.insert(*partition_of.at(id)).second)
      return false;
  return true;
}

} // namespace

read_more_heads walk_partitions(const queue_claim_request& req,
                                std::string& cursor, read_heads_after read) {
  // Reading 1 000 partitions every time cost a claim 17 ms with 1 200 of
  // them (PostgreSQL): start small, double, and go on at the next claim.
  constexpr std::int64_t most_per_claim = 1000;
  cursor = req.partition_after;
  auto first = std::max<std::int64_t>(64, 8 * std::int64_t{req.capacity});
  return [from = req.partition_after, step = first, done = std::int64_t{0},
          &cursor, read = std::move(read)](
           std::vector<queue_candidate>& heads) mutable {
    auto turn = read(from, std::min(step, most_per_claim - done), heads);
    done += turn.partitions;
    step *= 2;
    from = turn.last;
    if (turn.ring_done) {
      cursor.clear(); // the next claim starts at the first
      return false;
    }
    cursor = from;
    return done < most_per_claim;
  };
}

queue_choice choose_in_turns(const queue_claim_request& req,
                             const queue_load& load,
                             std::vector<queue_candidate> candidates,
                             const read_more_heads& read_more) {
  auto choice = choose_claims(req, load, candidates);
  // Fewer than asked: every ready item is here, heads and all.
  auto complete = static_cast<std::int64_t>(candidates.size())
                  < first_ready_to_read(req);
  auto more = [&] {
    return static_cast<std::int64_t>(choice.ids.size()) < choice.room
           || !one_per_partition(choice, candidates);
  };
  if (!req.queue.partition_concurrency || complete || !more())
    return choice;
  std::unordered_set<std::string> seen;
  for (auto& c : candidates)
    seen.insert(c.id);
  for (bool again = true; again && more();) {
    std::vector<queue_candidate> heads;
    again = read_more(heads);
    for (auto& h : heads)
      if (seen.insert(h.id).second)
        candidates.push_back(std::move(h));
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const queue_candidate& a, const queue_candidate& b) {
                       return std::tie(a.priority, a.seq)
                              < std::tie(b.priority, b.seq);
                     });
    choice = choose_claims(req, load, candidates);
  }
  return choice;
}

} // namespace perdure::persistence::detail

namespace perdure::persistence::detail {

void count_throttled(queue_stats& c) {
  auto& q = c.limits;
  auto all = (q.concurrency && c.total.running >= *q.concurrency)
             || (q.rate_limit && c.recent_starts >= *q.rate_limit);
  c.total.throttled = 0;
  for (auto& p : c.partitions) {
    auto full = q.partition_concurrency
                && p.running >= *q.partition_concurrency;
    p.throttled = all || full ? p.ready : 0;
    c.total.throttled += p.throttled;
  }
}

namespace {

/// The first index a new attempt forgets (see `new_attempt_marker`).
std::string first_forgotten(const std::string& journal, const std::string& run) {
  return "(SELECT COALESCE(MIN(seq), 0) FROM " + journal + " WHERE run_id = "
         + run
         + " AND kind IN ('step', 'transaction') AND outcome IN (1, 2))";
}

} // namespace

std::string new_attempt_marker(const std::string& journal,
                               const std::string& run, const std::string& now,
                               bool pg, const std::string& from) {
  auto cut = "CAST("
             + (from.empty() ? first_forgotten(journal, run) : from)
             + " AS TEXT)";
  return "INSERT INTO " + journal
         + " (run_id, seq, kind, name, outcome, payload, error, created_at) "
           "SELECT "
         + run + ", COALESCE(MAX(seq), -1) + 1, 'phase', 'attempt', 0, "
         + (pg ? "convert_to(" + cut + ", 'UTF8')" : "CAST(" + cut + " AS BLOB)")
         + ", NULL, " + now + " FROM " + journal + " WHERE run_id = " + run;
}

std::string forgotten_by_new_attempt(const std::string& journal,
                                     const std::string& run,
                                     const std::string& from) {
  return "DELETE FROM " + journal + " WHERE run_id = " + run + " AND seq >= "
         + (from.empty() ? first_forgotten(journal, run) : from)
         + " AND NOT (kind = 'transaction' AND outcome = 0) AND NOT (kind = "
           "'phase' AND name = 'attempt')";
}

} // namespace perdure::persistence::detail
