#pragma once

// Durable queues: named queues with global, per-process and per-partition
// concurrency, a rate limit, priorities, dedup ids and delayed items,
// whose items are workflow runs (ENQUEUED until a runtime claims them).
// Each process that registered a queue claims within its limits, on one
// queue actor per queue, and runs what it claimed on the queue's own
// supervised workers. See docs/architecture.md, "Queues".

#include <string>
#include <string_view>
#include <utility>

#include "perdure/client.hpp"
#include "perdure/persistence/codec.hpp"
#include "perdure/queues/queue_counts.hpp"
#include "perdure/queues/queue_options.hpp"
#include "perdure/runtime.hpp"
#include "perdure/sql_session.hpp"

namespace perdure::queues {

/// Registers queue `name` in `rt` (before `rt.start()`): the runtime then
/// claims and runs its items. Throws `invalid_argument` for a bad name or
/// options, or a queue registered twice.
void register_queue(runtime& rt, std::string name, queue_options opts = {});

namespace detail {

std::string enqueue_bytes(client& c, std::string_view queue,
                          std::string_view workflow, std::string inputs,
                          enqueue_options opts);

std::string stage_bytes(sql_session& tx, std::string_view queue,
                        std::string_view workflow, std::string inputs,
                        enqueue_options opts);

} // namespace detail

/// Enqueues workflow `workflow` with `input` in queue `queue` and returns
/// its handle once the item is durable. From any client or runtime; the
/// queue need not be registered in this process. With `opts.id` taken, or
/// `opts.dedup_id` held by an item queued or running, returns that item.
/// Throws `perdure::error`: `unknown_workflow` (a runtime that did not
/// register the workflow), `invalid_argument`, `payload_too_large`,
/// `conflicting_id` (the id names another workflow or input),
/// `not_running`.
template <class R, class A>
workflow_handle<R> enqueue(client& c, std::string_view queue,
                           std::string_view workflow, const A& input,
                           enqueue_options opts = {}) {
  auto id = detail::enqueue_bytes(
    c, queue, workflow, persistence::encode(input, c.cfg().payload_encoding),
    std::move(opts));
  return c.retrieve_workflow<R>(std::move(id));
}

/// `enqueue` for a workflow without input.
template <class R>
workflow_handle<R> enqueue(client& c, std::string_view queue,
                           std::string_view workflow,
                           enqueue_options opts = {}) {
  auto id = detail::enqueue_bytes(c, queue, workflow, std::string{},
                                  std::move(opts));
  return c.retrieve_workflow<R>(std::move(id));
}

/// Enqueues inside transaction `tx` (a transactional step's session, or the
/// application's own: `pqxx_session`, `sqlite_session`): the item exists,
/// and is announced, only if that transaction commits. Returns its id (or
/// the dedup holder's); `retrieve_workflow` gives its handle after the
/// commit. Inputs are encoded as JSON.
template <class A>
std::string enqueue(sql_session& tx, std::string_view queue,
                    std::string_view workflow, const A& input,
                    enqueue_options opts = {}) {
  return detail::stage_bytes(
    tx, queue, workflow, persistence::encode(input, persistence::encoding::json),
    std::move(opts));
}

/// Returns queue `queue`'s depth, running and throttled items, in total
/// and per partition, its dead letters and its recent starts.
queue_stats stats(client& c, std::string_view queue);

/// Moves dead-lettered item `id` back to its queue with fresh attempts (its
/// steps that completed stay recorded). Throws `not_found` unless it is a
/// dead letter, `conflicting_id` if another item holds its dedup id now.
/// Dead letters are listed by `list_runs` with status `dead_letter`.
void requeue(client& c, const std::string& id);

} // namespace perdure::queues
