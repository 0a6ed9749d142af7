#pragma once

// The queue actor: one per queue per process. It claims the queue's items
// within its limits (on the runtime's control threads: a claim is a
// database transaction), wakes on notices, on its items' ends and on
// timers that adapt to what held the last claim back, and supervises the
// actors of the items it holds.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>

#include <cstdint>
#include <string>

namespace perdure::queues::detail {

class queue_service;
struct queue_entry;

/// Look for items now.
using wake_atom = caf::atom_constant<caf::atom("qwake")>;
/// A timer of the actor's own came due.
using tick_atom = caf::atom_constant<caf::atom("qtick")>;
/// (id, actor): an item runs here, hosted by actor.
using held_atom = caf::atom_constant<caf::atom("qheld")>;
/// (id): an item runs here no more.
using released_atom = caf::atom_constant<caf::atom("qfree")>;
/// (claimed, concurrency bound, rate wait ms, next ready ms): a claim's
/// result (-1: none; claimed -1: the claim failed).
using claimed_atom = caf::atom_constant<caf::atom("qclaimed")>;

/// Spawns the actor of queue `q`.
caf::actor spawn_queue_actor(caf::actor_system& sys, queue_service& svc,
                             queue_entry& q);

} // namespace perdure::queues::detail
