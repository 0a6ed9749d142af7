#pragma once

// The object actor's state (see object_actor.hpp): the key's state and
// its invocations, each hosting an execution, run one at a time. Private to
// object_host.cpp and object_actor.cpp.

#include <caf/actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "perdure/detail/execution/execution.hpp"
#include "perdure/detail/object/object_actor.hpp"
#include "perdure/detail/object_entry.hpp"
#include "perdure/detail/runtime/caf_messages.hpp"

namespace perdure::detail {

/// An invocation's mailbox: its object actor's, tagged with the
/// invocation's number.
class tagged_mailbox final : public execution_mailbox {
public:
  tagged_mailbox(caf::actor object, std::uint32_t exec)
    : object_(std::move(object)), exec_(exec) {
  }

  void tell(run_message m) const override {
    caf::anon_send(object_,
                   object_message{tagged_run_message{exec_, std::move(m)}});
  }

  void tell_later(std::chrono::milliseconds delay,
                  run_message m) const override {
    caf::delayed_anon_send(
      object_, delay, object_message{tagged_run_message{exec_, std::move(m)}});
  }

private:
  caf::actor object_;
  std::uint32_t exec_;
};

struct object_host;
using object_actor = caf::stateful_actor<object_host>;

/// A handler that cannot run (unknown, or the state cannot be read): its
/// invocation ends ERROR with `why`, changing nothing.
std::unique_ptr<run_driver> failing_driver(persistence::encoding enc,
                                           std::string why);

/// One invocation of the key, hosting its execution.
struct invocation final : execution_host {
  object_host* obj = nullptr;
  std::uint32_t tag = 0;
  bool shared = false;
  bool left = false;
  /// Its end is written (see `final_write`): it only waits for the commit.
  std::atomic<bool> submitted{false};
  execution exec;

  void quit() override {
    left = true; // the host drops it after this turn (it is inside it now)
  }

  std::unique_ptr<run_driver>
  start_code(run_core& core, const std::string& name, std::string& inputs,
             persistence::encoding enc,
             const std::vector<std::string>*& patches) override;

  void settle_end(persistence::completion_write& c) override;
  persistence::write final_write(persistence::completion_write c) override;
  /// The state this invocation leaves, encoded by `settle_end`.
  std::optional<std::string> end_state;

  bool may_passivate() const override {
    return false; // it holds the key while it waits
  }

  std::string held_key() const override;
};

/// The object actor's state.
struct object_host {
  object_actor* self = nullptr;
  runtime_services* rt = nullptr;
  const object_entry* entry = nullptr;
  std::string type;
  std::string key;
  persistence::fence owner;
  std::unique_ptr<state_box> state;
  /// The state after the last invocation whose end was written (encoded),
  /// to roll a failed one back to; and the version that state will have.
  std::string written;
  std::int64_t next_base = 0;
  /// An end did not commit: what the key holds is unsure here. No new
  /// invocation starts; the actor leaves once the ones committing ended.
  bool doomed = false;
  /// Set if the stored state could not be decoded: no handler runs on it.
  std::optional<std::string> unreadable;
  std::deque<persistence::run_record> queue;
  std::unordered_map<std::string, std::vector<persistence::journal_entry>>
    journals;
  /// The invocation running, and those whose ends commit meanwhile.
  std::unique_ptr<invocation> current;
  std::unordered_map<std::uint32_t, std::unique_ptr<invocation>> committing;
  /// Shared invocations running (on committed state, together).
  std::unordered_map<std::uint32_t, std::unique_ptr<invocation>> readers;
  std::uint32_t next_tag = 1;
  /// Invocations handed by this process (see `object_directory`).
  std::uint64_t received = 0;
  bool taking_inbox = false;
  bool inbox_again = false;
  /// Handed while a take of the inbox was under way: they join the queue
  /// with what it took, in inbox order (a call taken may be older).
  std::vector<persistence::run_record> handed_in_take;
  /// One idle timer at a time, armed when the key goes idle (not per
  /// call: a timer wakes CAF's clock thread); it looks at `idle_since`.
  bool idle_timer_armed = false;
  std::chrono::steady_clock::time_point idle_since{};
  bool stopping = false;

  void init(object_activation a);
  void on(object_message& m);
  void on_arrived(invocation_arrived& m);
  void on_inbox_news(inbox_news& m);
  void on_inbox_taken(inbox_taken& m);
  void on_queued_cancel(queued_cancel& m);
  void on_idle_check(idle_check& m);
  void arm_idle_timer(std::chrono::steady_clock::duration after);
  void run_next();
  /// Ends `run`, an invocation recovered too often, RETRIES_EXCEEDED.
  void give_up(persistence::run_record run);
  /// Starts `run` as a new invocation.
  std::unique_ptr<invocation> start(persistence::run_record run);
  /// Returns whether no step body of an invocation here runs (those with
  /// one quit when it replied): the actor may go.
  bool bodies_done();
  /// Routes `m` to the invocation it is for, if it is still here.
  void deliver(tagged_run_message& m);
  /// Invocation `inv` ended (committed or not).
  void finished(std::unique_ptr<invocation> inv);
  /// Queues claimed invocation `run`, known to the runtime from now on (a
  /// cancel reaches it; the stranded-work check sees it held).
  void hold(persistence::run_record run);
  void take_inbox();
  /// Gives the key up, nothing running: `why` its next call (or its state,
  /// at `unreadable_version`) is not for this process's code. The calls
  /// it held go back to the store for a process that can run them.
  void give_up_key(const std::string& why,
                   std::optional<std::int64_t> unreadable_version);
  /// Leaves memory; `revive`: the key's invocations may be left, so it is
  /// claimed again soon.
  void leave(bool revive);
  /// Quits the actor, telling the runtime of the invocations it leaves.
  void quit();
  /// Tells the runtime this actor no longer runs or holds invocation
  /// `run_id` (its callers read the store).
  void forget(const std::string& run_id);
  /// Quits once the messages already in the mailbox are handled.
  void quit_soon();
};

} // namespace perdure::detail
