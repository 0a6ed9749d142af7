// Calls of virtual objects from application code: an invocation is a run in
// the key's inbox, stored before the caller hears back, then handed to (or
// claimed by, or announced to) the key's holder.

#include <future>

#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/runs/completion_watchers.hpp"
#include "perdure/detail/runtime/ids.hpp"
#include "perdure/detail/timer/clock.hpp"
#include "perdure/detail/object/object_directory.hpp"
#include "perdure/detail/runtime/runtime_impl.hpp"
#include "perdure/detail/time_math.hpp"
#include "perdure/detail/tracing/run_trace.hpp"
#include "perdure/runtime.hpp"

namespace perdure {

namespace {

/// Returns the id of the invocation an idempotency key names: one per
/// object, ever.
std::string idempotent_id(std::string_view type, std::string_view key,
                          const std::string& idempotency_key) {
  auto id = "o:" + std::string{type} + '\x1f' + std::string{key} + '\x1f'
            + idempotency_key;
  return id;
}

/// A call sent later (`send_later`): what the workflow that waits for its
/// time sends then.
struct delayed_call {
  std::string type;
  std::string key;
  std::string handler;
  std::string input;
  std::int64_t due_ms = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(type), CEREAL_NVP(key), CEREAL_NVP(handler),
       CEREAL_NVP(input), CEREAL_NVP(due_ms));
  }
};

/// The workflow every runtime registers for `send_later`: sleeps durably,
/// then sends (once: the send is journaled).
task<void> send_when_due(workflow_context& ctx, delayed_call call) {
  co_await ctx.sleep_until(std::chrono::system_clock::time_point{
    std::chrono::milliseconds{call.due_ms}});
  co_await ctx.send_encoded<void>(call.type, call.key, call.handler,
                                  std::move(call.input));
}

/// Throws `conflicting_id` unless `existing` is the same call as `run`.
void check_same_call(const persistence::run_record& existing,
                     const persistence::run_record& run) {
  if (existing.name != run.name
      || (existing.inputs != run.inputs && !existing.collected_at_ms))
    throw error(errc::conflicting_id,
                "idempotency key of call '" + run.id
                  + "' was used before for another handler or input");
}

} // namespace

namespace {

/// Refuses a call this runtime cannot accept, with what to do instead.
void check_call(detail::runtime_impl& rt, std::string_view type,
                std::string_view key, std::string_view handler,
                const std::string& inputs) {
  if (!rt.running())
    throw error(errc::not_running, "start() the runtime before calling objects");
  detail::check_key("object type", type);
  detail::check_key("object key", key);
  detail::check_name("handler name", handler);
  if (!rt.client_mode) {
    auto t = rt.object_types.find(std::string{type});
    if (t == rt.object_types.end())
      throw error(errc::unknown_workflow,
                  "no object type registered as '" + std::string{type} + "'");
    if (t->second.handlers.count(std::string{handler}) == 0)
      throw error(errc::unknown_workflow,
                  "object type '" + std::string{type} + "' has no handler '"
                    + std::string{handler} + "'");
    rt.svc.lease->check();
  }
  if (inputs.size() > rt.cfg.max_payload_bytes)
    throw error(errc::payload_too_large,
                "input of " + std::to_string(inputs.size())
                  + " bytes exceeds the limit of "
                  + std::to_string(rt.cfg.max_payload_bytes));
}

/// A client process (no executor): stores the call ENQUEUED and tells the
/// runtimes its key has news.
void store_for_runtimes(detail::runtime_impl& rt,
                        persistence::run_record& run) {
  run.status = run_status::enqueued;
  auto stored = rt.svc.stores->with(
    [&](persistence::store& db) { return db.create_run(run); });
  if (!stored.created)
    check_same_call(stored.run, run);
  try {
    rt.svc.stores->with([&](persistence::store& db) {
      db.notify(persistence::notice::calls(run.object_type, run.object_key));
    });
  } catch (const std::exception& ex) {
    // Stored anyway: runtimes claim keys with waiting invocations.
    rt.log().warn("perdure: could not announce call {}: {}", run.id,
                  ex.what());
  }
}

/// Records in `run` what the writer said of its place in its key's inbox.
void note_stored(persistence::run_record& run,
                 const persistence::write_result& r) {
  if (r.enqueued) // older calls of the key wait: it follows them
    run.status = run_status::enqueued;
  run.inbox_seq = r.inbox_seq;
}

/// The error of a call the writer could not store. It may have committed
/// all the same (the key's next claim takes it then).
error not_stored(const std::string& id, errc reported) {
  auto full = reported == errc::store_full;
  return error(full ? errc::store_full : errc::store_unavailable,
               "could not store call '" + id + "': the database is "
                 + (full ? "full" : "unavailable")
                 + "; it may have been stored all the same: call again with "
                   "an idempotency key");
}

/// A runtime: stores the call through the group-commit writer, like starts
/// (calls from many threads share a commit), then delivers it to its key.
/// Durable first, then delivered.
void store_and_deliver(detail::runtime_impl& rt,
                       persistence::run_record& run) {
  auto to = rt.svc.objects->prepare(run);
  // A used key whose call is gone by the time it is read was a tombstone
  // that expired in between: the key is free, the call tries again.
  std::optional<persistence::run_record> existing;
  for (int attempt = 1; !existing; ++attempt) {
    std::promise<persistence::write_result> written;
    auto ack = written.get_future();
    rt.svc.writer->create(run, [&written](persistence::write_result r) {
      written.set_value(std::move(r));
    });
    auto result = ack.get();
    switch (result.ack) {
      case persistence::write_ack::committed:
        note_stored(run, result);
        rt.svc.objects->deliver(to, run);
        return;
      case persistence::write_ack::failed:
      case persistence::write_ack::superseded:
        throw not_stored(run.id, result.error);
      case persistence::write_ack::rejected:
        break;
    }
    // The idempotency key was used: the same call returns the first one.
    existing = rt.svc.stores->with(
      [&](persistence::store& db) { return db.get_run(run.id); });
    if (!existing && attempt == 3)
      throw error(errc::store_error,
                  "call '" + run.id + "' was taken and gone three times in a "
                  "row: something deletes calls as they start; try again");
  }
  check_same_call(*existing, run);
  if (existing->status == run_status::enqueued
      || existing->status == run_status::pending)
    rt.svc.objects->reach(run.object_type, run.object_key, true);
}

/// Returns the invocation record of a call, not yet stored.
persistence::run_record new_call(detail::runtime_impl& rt,
                                 std::string_view type, std::string_view key,
                                 std::string_view handler, std::string inputs,
                                 const call_options& opts) {
  persistence::run_record run;
  run.id = opts.idempotency_key.empty()
             ? detail::random_id()
             : idempotent_id(type, key, opts.idempotency_key);
  if (!opts.idempotency_key.empty()) {
    detail::check_key("idempotency key", opts.idempotency_key);
    detail::check_name("idempotency key", run.id);
  }
  run.name = std::string{handler};
  run.inputs = std::move(inputs);
  run.app_version = rt.cfg.app_version;
  run.created_at_ms = detail::now_ms();
  run.object_type = std::string{type};
  run.object_key = std::string{key};
  run.traceparent = detail::traceparent_for_start(opts.traceparent);
  return run;
}

/// `call_async` in a runtime: the writer's thread hands the stored call to
/// its key's actor, whose committed end reaches `token`'s callback from
/// memory. The rarer ways (no actor here, an idempotency key used before)
/// go to a control thread, and the end is read from the store.
void store_and_deliver_async(detail::runtime_impl& rt,
                             persistence::run_record run, std::uint64_t token,
                             bool keyed) {
  auto to = rt.svc.objects->prepare(run);
  auto stored = run; // the writer takes one; the actor gets the other
  rt.svc.writer->create(
    std::move(stored),
    [rt = &rt, to, run = std::move(run), token,
     keyed](persistence::write_result r) mutable {
      // The writer's callbacks run before it stops, which is before the
      // runtime is torn down: `rt` is alive here.
      switch (r.ack) {
        case persistence::write_ack::committed:
          note_stored(run, r);
          if (keyed) // the run is this call
            rt->svc.ends->confirm(run.id, token);
          if (rt->svc.objects->hand(to, run))
            return;
          rt->svc.control->post([rt, run = std::move(run), token] {
            rt->svc.objects->reach(run.object_type, run.object_key, true);
            rt->svc.ends->read_later(run.id, token);
          });
          return;
        case persistence::write_ack::failed:
        case persistence::write_ack::superseded:
          rt->svc.ends->finish(
            run.id, token,
            detail::call_end{run.id, {}, std::make_exception_ptr(
                                           not_stored(run.id, r.error))});
          return;
        case persistence::write_ack::rejected:
          // The idempotency key was used: the blocking way reads the first
          // call (it may take a store read or two), on a control thread.
          rt->svc.control->post([rt, run = std::move(run), token]() mutable {
            auto id = run.id;
            try {
              store_and_deliver(*rt, run);
              rt->svc.ends->read_later(id, token);
            } catch (...) {
              rt->svc.ends->finish(
                id, token,
                detail::call_end{id, {}, std::current_exception()});
            }
          });
          return;
      }
    });
}

} // namespace

std::string client::invoke(std::string_view type, std::string_view key,
                           std::string_view handler, std::string inputs,
                           call_options opts) {
  auto& rt = *impl_;
  check_call(rt, type, key, handler, inputs);
  auto run = new_call(rt, type, key, handler, std::move(inputs), opts);
  detail::runtime_impl::client_call call{rt};
  if (rt.client_mode)
    store_for_runtimes(rt, run);
  else
    store_and_deliver(rt, run);
  return run.id;
}

namespace {

/// `call_async`'s way (`in_place`: `done` only wakes a waiting thread;
/// `keyed`: made with an idempotency key, which may have been used).
std::string start_call(detail::runtime_impl& rt, persistence::run_record run,
                       std::function<void(detail::call_end)> done,
                       bool in_place, bool keyed) {
  auto id = run.id;
  // Before the write: its end may come before `create` returns. With a
  // key, an end told before the write is known to be this call's waits
  // (an earlier call under the key may end first, with other input).
  auto token =
    rt.svc.ends->on_outcome(id, std::move(done), in_place, !keyed);
  if (rt.client_mode) {
    // No writer or actors here: stored now, its end read from the store.
    try {
      store_for_runtimes(rt, run);
    } catch (...) {
      rt.svc.ends->finish(id, token,
                          detail::call_end{id, {}, std::current_exception()});
      return id;
    }
    rt.svc.ends->read_later(id, token);
    return id;
  }
  store_and_deliver_async(rt, std::move(run), token, keyed);
  return id;
}

} // namespace

std::string client::invoke_async(std::string_view type, std::string_view key,
                                 std::string_view handler, std::string inputs,
                                 call_options opts,
                                 std::function<void(detail::call_end)> done) {
  auto& rt = *impl_;
  check_call(rt, type, key, handler, inputs);
  auto run = new_call(rt, type, key, handler, std::move(inputs), opts);
  detail::runtime_impl::client_call call{rt};
  return start_call(rt, std::move(run), std::move(done), false,
                    !opts.idempotency_key.empty());
}

detail::call_end client::invoke_and_wait(std::string_view type,
                                         std::string_view key,
                                         std::string_view handler,
                                         std::string inputs,
                                         call_options opts) {
  auto& rt = *impl_;
  if (rt.running() && rt.svc.ends->on_callback_thread()) {
    // A callback's thread reads the store for ends from elsewhere: it
    // cannot also wait for that. It waits the way `send().get()` does.
    auto id = invoke(type, key, handler, std::move(inputs), std::move(opts));
    detail::call_end end;
    end.id = id;
    try {
      end.outcome = detail::await_run(rt, id, std::chrono::milliseconds::max());
    } catch (...) {
      end.failure = std::current_exception();
    }
    return end;
  }
  check_call(rt, type, key, handler, inputs);
  auto run = new_call(rt, type, key, handler, std::move(inputs), opts);
  std::promise<detail::call_end> ended;
  auto end = ended.get_future();
  {
    detail::runtime_impl::client_call call{rt};
    // Woken once, by whoever learns the end: the actor's thread when the
    // end commits here, no hand-off in between.
    start_call(rt, std::move(run),
               [&ended](detail::call_end e) { ended.set_value(std::move(e)); },
               true, !opts.idempotency_key.empty());
  }
  return end.get();
}

std::optional<std::string> client::state_bytes(std::string_view type,
                                               std::string_view key) {
  if (!impl_->running())
    throw error(errc::not_running, "start() the runtime before reading objects");
  detail::runtime_impl::client_call call{*impl_};
  auto object = impl_->svc.stores->with(
    [&](persistence::store& db) { return db.get_object(type, key); });
  if (!object || object->state.empty())
    return std::nullopt;
  return std::move(object->state);
}

std::vector<std::string> client::list_objects(std::string_view type,
                                              std::string_view after,
                                              std::int64_t limit) {
  if (limit < 1 || limit > 1000)
    throw error(errc::invalid_argument, "limit must be 1 to 1000");
  if (!impl_->running())
    throw error(errc::not_running, "start() the runtime before listing objects");
  detail::runtime_impl::client_call call{*impl_};
  return impl_->svc.stores->with([&](persistence::store& db) {
    return db.list_object_keys(type, after, limit);
  });
}

std::string client::schedule_call(std::string_view type, std::string_view key,
                                  std::string_view handler, std::string inputs,
                                  std::chrono::milliseconds delay,
                                  call_options opts) {
  detail::check_key("object type", type);
  detail::check_key("object key", key);
  detail::check_name("handler name", handler);
  if (!impl_->client_mode) {
    auto t = impl_->object_types.find(std::string{type});
    if (t == impl_->object_types.end()
        || t->second.handlers.count(std::string{handler}) == 0)
      throw error(errc::unknown_workflow,
                  "no handler '" + std::string{handler} + "' of object type '"
                    + std::string{type} + "' registered");
  }
  delayed_call call{std::string{type}, std::string{key}, std::string{handler},
                    std::move(inputs),
                    detail::saturating_add(impl_->svc.clock->now_ms(),
                                           delay.count())};
  start_options start;
  if (!opts.idempotency_key.empty())
    start.id = "d:" + idempotent_id(type, key, opts.idempotency_key).substr(2);
  try {
    return start_workflow<void>(detail::delayed_call_workflow, call, start)
      .id();
  } catch (const error& ex) {
    if (ex.code() != errc::conflicting_id)
      throw;
    // Scheduled before (at another time): the same call stands as it was.
    auto existing = impl_->svc.stores->with(
      [&](persistence::store& db) { return db.get_run(start.id); });
    if (!existing || existing->name != detail::delayed_call_workflow)
      throw;
    auto first = persistence::decode<delayed_call>(existing->inputs);
    if (first.type != call.type || first.key != call.key
        || first.handler != call.handler || first.input != call.input)
      throw;
    return start.id;
  }
}

void runtime::add_internal_workflows() {
  add_workflow(detail::delayed_call_workflow,
               detail::make_workflow_entry(send_when_due));
}

detail::object_entry& runtime::add_object(
  std::string type,
  std::function<std::unique_ptr<detail::state_box>()> make_state) {
  detail::check_key("object type", type);
  if (impl_->running())
    throw error(errc::invalid_argument,
                "register object type '" + type + "' before start()");
  auto [i, added] = impl_->object_types.emplace(type, detail::object_entry{});
  if (!added)
    throw error(errc::invalid_argument,
                "object type '" + type + "' is already registered");
  i->second.make_state = std::move(make_state);
  return i->second;
}

} // namespace perdure
