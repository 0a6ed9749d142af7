#pragma once

// The queues of one runtime: what it registered, their actors and worker
// pools, and the hooks the runtime calls (see perdure/detail/queue_hooks).

#include <caf/actor.hpp>

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/timer/ticker.hpp"
#include "perdure/persistence/queue_store.hpp"
#include "perdure/queues/queue_options.hpp"

namespace perdure::detail {
struct runtime_services;
} // namespace perdure::detail

namespace perdure::queues::detail {

/// An item claimed here and not started yet, with its journal so far.
struct claimed_item {
  persistence::run_record run;
  std::vector<persistence::journal_entry> journal;
};

/// One registered queue.
struct queue_entry {
  std::string name;
  queue_options opts;
  /// Items claimed ahead for workers about to be idle (queues without a
  /// limit shared by processes only: for those, a claim takes only what
  /// idle workers start at once).
  /// Guards `claimed` and `in_memory`.
  std::mutex claimed_mtx;
  std::deque<claimed_item> claimed;
  /// Its items with an actor here: each holds one of its workers.
  std::unordered_set<std::string> in_memory;
  /// How fast its items end here (under `claimed_mtx`): what it claims
  /// ahead is about a tenth of a second's worth.
  std::int64_t ended = 0;
  std::int64_t rate_since_ms = 0;
  std::int64_t ended_since = 0;
  double ends_per_s = 0;
  /// Where its next claim reads partitions from (see
  /// `queue_claim_request::partition_after`).
  std::string partition_cursor;
  /// Its workers' threads (steps and transactions of its items).
  std::unique_ptr<perdure::detail::step_executor> pool;
  /// Whether it has a limit shared by processes (see `shares_limits`).
  bool shared = false;
  /// Its queue actor (claims, supervises its items' actors).
  caf::actor actor;
};

class queue_service final : public perdure::detail::queue_hooks {
public:
  explicit queue_service(perdure::detail::runtime_services& rt);
  ~queue_service() override;

  /// Registers `name` (before the runtime starts).
  void add(std::string name, queue_options opts);

  /// Returns the claim of `q` this process makes now (capacity: its
  /// workers).
  persistence::queue_claim_request claim_request(queue_entry& q) const;

  perdure::detail::runtime_services& runtime() const noexcept {
    return rt_;
  }

  /// Keeps `items`, claimed for `q`, until its workers take them.
  static void stash(queue_entry& q, std::vector<claimed_item> items);

  /// Returns how many items claimed for `q` wait for a worker.
  static std::size_t waiting(queue_entry& q);

  /// Starts items claimed for `q` while it has idle workers here. From
  /// any thread: an item's end starts the next on the thread that ended
  /// it, without a hop through the queue actor.
  void start_claimed(queue_entry& q);

  /// Item `id` of `q` left memory without ending (it sleeps, or its actor
  /// failed and the runtime revives it): its worker is free.
  void left_memory(queue_entry& q, const std::string& id);

  void start() override;
  void stop() override;
  void join() override;
  void lease_lost() override;
  void notice(const std::string& queue) override;
  perdure::detail::step_executor* steps_for(const std::string& queue) override;
  std::optional<std::int64_t> retry_at(const std::string& queue,
                                       std::int32_t attempts,
                                       bool terminal) override;
  void holding(const std::string& queue, const std::string& id,
               const caf::actor& actor) override;
  void released(const std::string& id) override;
  void finishing(const std::string& id) override;
  void claimed_ahead(std::unordered_set<std::string>& ids) override;

private:
  /// Looks for items nobody announced (one statement for every queue).
  void probe();

  perdure::detail::runtime_services& rt_;
  /// Set before start, read-only while running.
  std::unordered_map<std::string, std::unique_ptr<queue_entry>> queues_;
  std::mutex mtx_;
  /// The queue of each item running here.
  std::unordered_map<std::string, std::string> items_;
  /// Items brought in before `start` (recovered, taken over), with their
  /// actors: their queue actors watch them once they exist.
  std::unordered_map<std::string, caf::actor> unwatched_;
  bool running_ = false;
  std::unique_ptr<perdure::detail::ticker> prober_;
};

} // namespace perdure::queues::detail
