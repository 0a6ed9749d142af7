#include "perdure/detail/object/object_actor.hpp"
#include "perdure/detail/object/object_host.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "perdure/detail/runtime/caf_messages.hpp"
#include "perdure/detail/timer/clock.hpp"
#include "perdure/detail/execution/execution.hpp"
#include "perdure/detail/object/object_directory.hpp"
#include "perdure/detail/object_entry.hpp"
#include "perdure/detail/delivery/notice_router.hpp"
#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/lease/lease_service.hpp"
#include "perdure/detail/object/object_directory.hpp"
#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/runs/completion_watchers.hpp"
#include "perdure/detail/runs/run_launcher.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/detail/timer/timer_service.hpp"
#include "perdure/persistence/journal_writer.hpp"

namespace perdure::detail {

namespace {

caf::behavior object_behavior(object_actor* self, runtime_services* rt,
                              object_activation a) {
  auto& host = self->state;
  host.self = self;
  host.rt = rt;
  self->set_exception_handler([self, rt](std::exception_ptr& ep) -> caf::error {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      rt->log().error("perdure: object {} '{}' actor failed: {}",
                      self->state.type, self->state.key, ex.what());
    } catch (...) {
    }
    if (self->state.current)
      self->state.current->exec.on_host_failure();
    for (auto& [tag, r] : self->state.readers)
      r->exec.on_host_failure();
    self->state.rt->objects->stopped(self->state.type, self->state.key,
                                     caf::actor_cast<caf::actor>(self), true);
    for (auto& run : self->state.queue)
      self->state.forget(run.id);
    for (auto& run : self->state.handed_in_take)
      self->state.forget(run.id);
    for (auto& [tag, c] : self->state.committing)
      self->state.forget(c->exec.run_id());
    return caf::sec::runtime_error;
  });
  // runtime::stop(): the invocation running stays until its step body
  // replied (the body may touch its frame); queued ones stay in the store.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& h = self->state;
    h.stopping = true;
    // Ends being committed are waited for (the writer outlives the actors);
    // the rest go once no step body of theirs runs.
    (void)msg;
    if (h.committing.empty() && h.bodies_done())
      h.quit();
  });
  host.init(std::move(a));
  return {
    [self](object_message& m) { self->state.on(m); },
  };
}

} // namespace

caf::actor spawn_object_actor(caf::actor_system& sys, runtime_services& rt,
                              object_activation a) {
  return sys.spawn(object_behavior, &rt, std::move(a));
}

void hand_invocation(const caf::actor& object, persistence::run_record run) {
  caf::anon_send(object, object_message{invocation_arrived{std::move(run)}});
}

void cancel_queued(const caf::actor& object, std::string run_id) {
  caf::anon_send(object, object_message{queued_cancel{std::move(run_id)}});
}

void tell_reclaim(const caf::actor& object) {
  caf::anon_send(object, object_message{inbox_news{false, true}});
}

void tell_inbox_news(const caf::actor& object) {
  caf::anon_send(object, object_message{inbox_news{}});
}

} // namespace perdure::detail
