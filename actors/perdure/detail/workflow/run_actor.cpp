#include "perdure/detail/workflow/run_actor.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "perdure/detail/runtime/caf_messages.hpp"
#include "perdure/detail/execution/execution.hpp"
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

/// An execution's mailbox: its run actor's.
class actor_mailbox final : public execution_mailbox {
public:
  explicit actor_mailbox(caf::actor me) : me_(std::move(me)) {
  }

  void tell(run_message m) const override {
    caf::anon_send(me_, std::move(m));
  }

  void tell_later(std::chrono::milliseconds delay,
                  run_message m) const override {
    caf::delayed_anon_send(me_, delay, std::move(m));
  }

private:
  caf::actor me_;
};

struct run_host;
using run_actor = caf::stateful_actor<run_host>;

/// The run actor's state: it hosts one execution, gives it a turn per
/// message, and quits when the execution is done.
struct run_host : execution_host {
  run_actor* self = nullptr;
  execution exec;

  void quit() override {
    self->quit();
  }

  /// A compensating saga: forward operations are over (its code runs only
  /// compensations now, see sagas/), and a second cancellation is dropped
  /// here, before it reaches the execution.
  void compensating() override {
    self->become([s = self](run_message& m) {
      if (auto* sig = std::get_if<signalled>(&m);
          sig && sig->kind == run_signal::cancel && sig->seq != 0)
        return;
      s->state.exec.receive(m);
    });
  }
};

caf::behavior run_behavior(run_actor* self, runtime_services* rt,
                           persistence::run_record run,
                           std::vector<persistence::journal_entry> journal) {
  auto& host = self->state;
  host.self = self;
  host.exec.init(host,
                 std::make_shared<actor_mailbox>(
                   caf::actor_cast<caf::actor>(self)),
                 *rt, std::move(run), std::move(journal));
  // Exceptions must not escape a handler: in CAF 0.17 they kill the actor.
  // The execution catches its own; anything unexpected ends this actor
  // alone, leaving the run PENDING for recovery.
  self->set_exception_handler([self, rt](std::exception_ptr& ep) -> caf::error {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      rt->log().error("perdure: run {} actor failed: {}",
                      self->state.exec.run_id(), ex.what());
    } catch (...) {
    }
    self->state.exec.on_host_failure();
    return caf::sec::runtime_error;
  });
  // runtime::stop() sends every run an exit: a run whose body still runs
  // stays until the body's reply (its frame must outlive the body).
  self->set_exit_handler([self](caf::exit_msg& msg) {
    if (self->state.exec.on_exit_request())
      self->quit(msg.reason);
  });
  return {
    [self](run_message& m) { self->state.exec.receive(m); },
  };
}

} // namespace

void signal_run(const caf::actor& run, std::uint32_t exec, run_signal kind,
                std::int32_t seq) {
  if (exec == run_registry::queued_exec)
    return; // not started: it looks at the store when it starts
  if (exec == 0)
    caf::anon_send(run, run_message{signalled{kind, seq}});
  else
    caf::anon_send(run, object_message{
                          tagged_run_message{exec, signalled{kind, seq}}});
}

caf::actor spawn_run_actor(caf::actor_system& sys, runtime_services& rt,
                           persistence::run_record run,
                           std::vector<persistence::journal_entry> journal) {
  return sys.spawn(run_behavior, &rt, std::move(run), std::move(journal));
}

} // namespace perdure::detail
