#pragma once

// The object actor: one per (type, key) in memory, holding the key's state
// and running its invocations one at a time, each as an execution (see
// execution.hpp) whose end commits the state with it.

#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "perdure/persistence/records.hpp"

namespace perdure::detail {

struct runtime_services;
struct object_entry;

/// A key just claimed: what its actor starts from.
struct object_activation {
  const object_entry* entry = nullptr;
  persistence::claimed_object claimed;
  /// The journals of the claimed invocations that had begun.
  std::vector<persistence::journal_entry> journals;
};

/// Spawns the actor of the key in `a`.
caf::actor spawn_object_actor(caf::actor_system& sys, runtime_services& rt,
                              object_activation a);

/// Hands `run`, an invocation stored PENDING under the key's epoch, to the
/// key's actor.
void hand_invocation(const caf::actor& object, persistence::run_record run);

/// Tells the key's actor that queued invocation `run_id` was cancelled.
void cancel_queued(const caf::actor& object, std::string run_id);

/// Tells the key's actor that invocations were stored ENQUEUED for it.
void tell_inbox_news(const caf::actor& object);

/// Tells key actor `object` to leave so that its key is claimed again (see
/// `object_directory::reclaim`).
void tell_reclaim(const caf::actor& object);

} // namespace perdure::detail
