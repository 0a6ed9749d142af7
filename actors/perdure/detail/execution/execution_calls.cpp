#include "perdure/detail/execution/execution.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "perdure/detail/timer/clock.hpp"
#include "perdure/detail/object/object_directory.hpp"
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
#include "perdure/detail/tracing/run_trace.hpp"
#include "perdure/persistence/journal_writer.hpp"
#include "perdure/persistence/text.hpp"

namespace perdure::detail {

namespace {

constexpr char key_separator = '\x1f';
constexpr char chain_separator = '\x1e';

/// Returns the keys of `chain` (see `run_record::call_chain`).
std::vector<std::string> keys_of(const std::string& chain) {
  std::vector<std::string> keys;
  std::size_t from = 0;
  while (from <= chain.size() && !chain.empty()) {
    auto to = chain.find(chain_separator, from);
    keys.push_back(chain.substr(from, to - from));
    if (to == std::string::npos)
      break;
    from = to + 1;
  }
  return keys;
}

/// Returns `key` as users write it: `type/key`.
std::string readable(const std::string& key) {
  auto out = key;
  std::replace(out.begin(), out.end(), key_separator, '/');
  return persistence::valid_text(out);
}

} // namespace

std::string execution::callee_chain(bool awaited) const {
  auto chain = call_chain ? *call_chain : std::string{};
  auto held = host_->held_key();
  if (awaited && !held.empty())
    chain = chain.empty() ? held : chain + chain_separator + held;
  return chain;
}

void execution::start_call() {
  ++attempt;
  auto target = op->object_type + key_separator + op->object_key;
  auto chain = callee_chain(op->awaited);
  // A call to a key this chain holds waits for itself: refused at once.
  std::string cycle;
  for (auto& k : keys_of(chain))
    if (!cycle.empty() || k == target)
      cycle += readable(k) + " -> ";
  if (!cycle.empty())
    cycle = "call cycle: " + cycle + readable(target)
            + " (the first waits for the last, which it holds)";
  persistence::run_record call;
  call.id = op->name;
  call.name = op->child_workflow;
  call.inputs = op->payload;
  call.app_version = rt->cfg.app_version;
  call.created_at_ms = detail::now_ms();
  call.parent_id = run_id_;
  call.object_type = op->object_type;
  call.object_key = op->object_key;
  call.call_chain = std::move(chain);
  call.traceparent = trace_->operation(op->seq).traceparent();
  auto me = mailbox_;
  rt->control->post([me, seq = op->seq, call = std::move(call), rt = rt,
                     fence = owner(), cycle = std::move(cycle)]() mutable {
    auto report = [&](persistence::outcome o, std::string error) {
      send_outcome(me, seq, o, {}, std::move(error), false);
    };
    if (!cycle.empty())
      return report(persistence::outcome::terminal, cycle);
    auto type = rt->object_types.find(call.object_type);
    if (type == rt->object_types.end())
      return report(persistence::outcome::terminal,
                    "no object type registered as '"
                      + persistence::valid_text(call.object_type) + "'");
    if (type->second.handlers.count(call.name) == 0)
      return report(persistence::outcome::terminal,
                    "object type '" + call.object_type + "' has no handler '"
                      + persistence::valid_text(call.name) + "'");
    if (!persistence::is_valid_key(call.object_key))
      return report(persistence::outcome::terminal,
                    "object keys must be 1 to 255 bytes of UTF-8 without NUL "
                    "or the control characters 0x1E and 0x1F");
    auto to = rt->objects->prepare(call);
    auto type_key = std::make_pair(call.object_type, call.object_key);
    create_child_run(
      *rt, me, seq, fence, call,
      [rt, &to, &call](persistence::run_record& stored) {
        // The record as prepared, as stored: ENQUEUED if older calls of
        // its key wait (then not handed), and its inbox place.
        call.status = stored.status;
        call.inbox_seq = stored.inbox_seq;
        rt->objects->deliver(to, call);
      },
      [rt, &type_key](const persistence::run_record&) {
        // Stored before a crash: make sure its key's holder runs it.
        rt->objects->reach(type_key.first, type_key.second, true);
      });
  });
}

} // namespace perdure::detail
