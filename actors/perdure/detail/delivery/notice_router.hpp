#pragma once

// What processes sharing the database tell each other (see
// persistence/notice.hpp): notices heard are routed to the run, key, queue
// or takeover they concern; deliveries made here are announced to the
// owner elsewhere. Cancellations are routed here too, whoever asked
// (a client, a parent, a deadline, a notice).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "perdure/persistence/delivery_listener.hpp"
#include "perdure/persistence/notice.hpp"
#include "perdure/persistence/records.hpp"

namespace perdure::detail {

struct runtime_services;

class notice_router {
public:
  explicit notice_router(runtime_services& svc);
  ~notice_router();

  /// Listens for notices (before any run looks at the store: a delivery
  /// committed after a run's look is then heard of).
  void listen(const persistence::store_options& opts);
  /// Stops listening (no notice arrives after this returns).
  void stop_listening();

  /// Tells the processes sharing the database notice `n` about a run
  /// (woken, cancelled, a saga asked to cancel), unless it runs here.
  void announce(const persistence::notice& n);

  /// Brings back this executor's runs that should be in memory and are not
  /// (a delivery from another process while passivated), and signals again
  /// sagas asked to cancel.
  void sweep();

  /// Run `id`'s deadline `due_ms` came: cancels it if that is still its
  /// deadline (on the control executor; a queue item's later attempt has
  /// its own). A store failure tries again later.
  void deadline_passed(const std::string& id, std::int64_t due_ms);

  /// Acts on what `store::cancel_run` did to the runs of a tree, here and
  /// (announced, unless the store's transaction `announced` them already:
  /// `cancel_runs`) in other processes.
  void apply_cancel(const std::vector<persistence::cancelled_run>& runs,
                    bool announced = false);

  /// Run `id` (the root of a cancelled tree) ended: that is a delivery to
  /// its parent, which the store marked if passivated; wakes it here or,
  /// announced, in its own process.
  void tell_parent(const std::string& id);

private:
  void on_notice(const persistence::notice& n);
  /// Run `id` was cancelled in the store: stops its actor, if any.
  void cancelled(const std::string& id);
  /// Saga `id` was asked to cancel in the store: signals its actor, or
  /// brings it back if it is ours and passivated (it observes the request
  /// when it replays).
  void cancel_signalled(const std::string& id);

  runtime_services& svc_;
  std::unique_ptr<persistence::delivery_listener> listener_;
};

} // namespace perdure::detail
