#pragma once

// Which ready items one claim of a queue takes: the limits, counted by the
// store inside the claiming transaction, applied the same way on both
// stores.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "perdure/persistence/queue_store.hpp"

namespace perdure::persistence::detail {

/// A ready item as the store read it.
struct queue_candidate {
  std::string id;
  std::string name;
  std::string app_version;
  std::string partition_key;
  /// Never started: no journal yet.
  bool fresh = false;
  /// Where it stands in the queue's order: priority, then age (PostgreSQL
  /// sorts what it read in several reads by them).
  std::int64_t priority = 0;
  std::int64_t seq = 0;
};

/// What runs and what started lately in a queue, read under its lock.
struct queue_load {
  /// The database's clock now (ms since the epoch).
  std::int64_t db_now_ms = 0;
  /// PENDING items of the queue.
  std::int64_t running = 0;
  /// PENDING items per partition (only with a partition limit).
  std::unordered_map<std::string, std::int64_t> running_by_partition;
  /// Starts since `db_now_ms - window_ms(req)`, and the oldest of them.
  std::int64_t recent_starts = 0;
  std::optional<std::int64_t> oldest_recent_start;
};

/// The ids to claim, in claiming order, and what held the rest back.
struct queue_choice {
  std::vector<std::string> ids;
  /// Per id: `queue_candidate::fresh`.
  std::vector<bool> fresh;
  bool concurrency_bound = false;
  std::optional<std::int64_t> rate_wait_ms;
  /// How many the claim may take: its idle workers, within what the
  /// queue's concurrency and rate limits leave.
  std::int64_t room = 0;
};

/// Returns how far back the rate limit counts starts (its period plus the
/// margin); 0 without a rate limit.
std::int64_t rate_window_ms(const queue_claim_request& req);

/// Returns whether claims of `q` must be serialised across processes (a
/// limit that counts what other processes claimed).
bool shares_limits(const queue_definition& q);

/// How many ready items of each partition a claim reads: enough for every
/// slot it may fill.
std::int64_t heads_per_partition(const queue_claim_request& req);

/// How many first ready items (by priority, then age) a claim reads: its
/// idle workers; four times as many with a partition limit (room for a few
/// partitions at their limit), where a partition's first ones in that
/// order are its heads.
std::int64_t first_ready_to_read(const queue_claim_request& req);

/// Reads more partition heads into its argument (ordered or not; items
/// read before may come again); returns false once this claim may read no
/// more.
using read_more_heads = std::function<bool(std::vector<queue_candidate>&)>;

/// One read of a partitioned queue's heads, in turn order (`walk_partitions`).
struct heads_read {
  std::int64_t partitions = 0; // partitions read
  std::string last;            // the last read, in turn order
  bool ring_done = false;      // back at the claim's first partition
};

/// Reads into its last argument the heads of at most `most` partitions
/// with items ready, in turn order: those after `from`, then from the
/// first one, up to the claim's `partition_after` (inclusive; if `from`
/// is before it, only those between).
using read_heads_after = std::function<heads_read(
  const std::string& from, std::int64_t most, std::vector<queue_candidate>&)>;

/// A `read_more_heads` that reads the partitions in turn from
/// `req.partition_after` (64 of them or 8 per idle worker at first, twice
/// as many each further read, at most 1 000 a claim), and leaves in
/// `cursor` where the next claim starts (empty: at the first).
read_more_heads walk_partitions(const queue_claim_request& req,
                                std::string& cursor,
                                read_heads_after read);

/// `choose_claims` from `candidates`, the queue's first ready items by
/// priority then age, `first_ready_to_read` of them asked for. With a
/// partition limit, while the choice would give a partition a second turn
/// before the others had their first, or leaves room (a busy partition,
/// ones at their limit), `read_more` reads other partitions' heads, and
/// the choice is made again from everything read, by priority then age.
/// Both stores claim this way: a claim costs what its idle workers need,
/// not a read of every partition.
queue_choice choose_in_turns(const queue_claim_request& req,
                             const queue_load& load,
                             std::vector<queue_candidate> candidates,
                             const read_more_heads& read_more);

/// Chooses from `candidates`, ordered by priority then age:
/// round-robin across partitions, each within its limit, all within the
/// queue's concurrency, its rate limit and `req.capacity`; skips items the
/// claimer cannot run (`req.filter`).
queue_choice choose_claims(const queue_claim_request& req,
                           const queue_load& load,
                           const std::vector<queue_candidate>& candidates);

} // namespace perdure::persistence::detail

namespace perdure::persistence::detail {

/// Fills in the `throttled` counts of `c` from its stored limits: ready
/// items of a partition at its limit, and every ready item while the
/// queue's concurrency or rate is used up.
void count_throttled(queue_stats& c);

/// The journal of a retried or requeued item: each attempt is a run of
/// its own, resuming after the steps that succeeded before the first step
/// (or transaction) that failed -- or from the start if none failed (the
/// code threw on its own, a child failed, a wait timed out). The two
/// statements, in this order, for run `run` (a `$n`/`?n` parameter) at
/// `now`:
/// - a marker of the attempt (kind 'phase', name 'attempt', payload the
///   first index forgotten) after the journal's last entry: the attempt's
///   new operations take indexes after it, so ids of calls, children and
///   awakeables never repeat one of an earlier attempt;
/// - what the attempt forgets: the entries from that index on, but for the
///   transactional steps that committed (a later attempt takes their
///   result by name instead of committing again) and earlier markers.
/// `pg`: PostgreSQL's spelling of a payload (bytea) from text. `cut`: an
/// SQL expression of the first index forgotten, if not the first failure
/// (a resume: the last one).
std::string new_attempt_marker(const std::string& journal,
                               const std::string& run, const std::string& now,
                               bool pg, const std::string& cut = {});
std::string forgotten_by_new_attempt(const std::string& journal,
                                     const std::string& run,
                                     const std::string& cut = {});

} // namespace perdure::persistence::detail
