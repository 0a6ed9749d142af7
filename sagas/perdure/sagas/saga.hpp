#pragma once

// Sagas: a workflow whose steps each come with a compensation. When the
// saga fails for good, is cancelled or passes its deadline, the
// compensations of the steps that completed run in reverse order, each a
// durable step retried with backoff; the run ends COMPENSATED (every one
// succeeded; the error is the original one) or COMPENSATION_FAILED (the
// error reports what could not be undone).
//
// The compensation stack is the journal itself: after a crash the saga's
// code replays, each completed step returns its recorded result and pushes
// its compensation again, and finished compensations are recorded steps
// that do not run twice.
//
// ~~~
// rt.register_workflow("trip", [](workflow_context& ctx, trip t) -> task<int> {
//   co_return co_await sagas::run<int>(ctx, [&](sagas::saga& s) -> task<int> {
//     auto f = co_await s.step("flight", [&] { return book_flight(t); },
//                              [&](const booking& b) { release(b); });
//     ...
//   });
// });
// ~~~

#include <cereal/types/optional.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "perdure/cancelled_error.hpp"
#include "perdure/final_status_error.hpp"
#include "perdure/retry_policy.hpp"
#include "perdure/sagas/report.hpp"
#include "perdure/task.hpp"
#include "perdure/workflow_context.hpp"

namespace perdure::sagas {

/// How a saga compensates.
struct saga_options {
  /// Attempts of each compensation (with backoff) before it counts as not
  /// undone. A `terminal_error` from a compensation is not retried.
  retry_policy compensation_policy{.max_attempts = 8,
                                   .initial_delay = std::chrono::milliseconds{100},
                                   .backoff = 2.0,
                                   .max_delay = std::chrono::seconds{5}};
};

/// One member of a parallel group (`saga::all`).
template <class R>
struct member {
  std::string name;
  std::function<R()> action;
  std::function<void(const R&)> compensation;
};

namespace detail {

template <class T>
struct is_task : std::false_type {};

template <class T>
struct is_task<task<T>> : std::true_type {};

template <class T>
struct task_value;

template <class T>
struct task_value<task<T>> {
  using type = T;
};

/// A parallel group's recorded outcome: each member's result, or its error.
template <class R>
struct group_outcome {
  std::vector<std::optional<R>> results;
  std::vector<std::string> errors;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(results), CEREAL_NVP(errors));
  }
};

/// Returns what `ep` says, for a report.
inline std::string describe(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

} // namespace detail

/// A saga's scope inside one workflow run: its steps, and what undoes them.
/// Made by `run`, which also compensates.
class saga {
public:
  saga(workflow_context& ctx, saga_options opts)
    : ctx_(&ctx), opts_(std::move(opts)) {
  }

  saga(const saga&) = delete;
  saga& operator=(const saga&) = delete;

  workflow_context& context() noexcept {
    return *ctx_;
  }

  /// A key naming step `name` of this run: an action calling another
  /// service passes it along, so a step run again after a crash (steps are
  /// at least once) is the same request there.
  std::string idempotency_key(const std::string& name) const {
    return ctx_->workflow_id() + "/" + name;
  }

  /// Runs `action` as step `name` and, once it completed, remembers
  /// `compensation` with its result. `action` is a plain function (run as a
  /// durable step on a step thread, retried under `policy`) or returns a
  /// `task` (awaited here: it calls objects or child workflows, durably).
  /// `compensation` takes the action's result (nothing for a void action)
  /// and is likewise plain or a task.
  ///
  /// Compensations run after the saga's body has ended: its locals are
  /// gone by then. A compensation gets the step's result; anything else of
  /// the body it needs it captures by value (references to what outlives
  /// the body -- the workflow's own locals and inputs -- are fine).
  ///
  /// As for `workflow_context::step` (GCC 12): a lambda written inside the
  /// `co_await` must capture by reference only; one that captures by value
  /// (a compensation keeping a loop's name, say) is named first.
  template <class Action, class Compensation>
  auto step(std::string name, Action&& action, Compensation&& compensation,
            retry_policy policy = {}) {
    perdure::detail::check_step_callable<Action>();
    perdure::detail::check_step_callable<Compensation>();
    refuse_while_compensating(name);
    using returned = std::invoke_result_t<std::decay_t<Action>&>;
    if constexpr (detail::is_task<returned>::value)
      return task_step<typename detail::task_value<returned>::type>(
        std::move(name), std::decay_t<Action>{std::forward<Action>(action)},
        std::decay_t<Compensation>{std::forward<Compensation>(compensation)});
    else
      return plain_step<returned>(
        std::move(name), std::decay_t<Action>{std::forward<Action>(action)},
        std::decay_t<Compensation>{std::forward<Compensation>(compensation)},
        policy);
  }

  /// Runs `action(sql_session&)` as transactional step `name` (see
  /// `workflow_context::transaction`: its statements and its checkpoint
  /// commit together, exactly once) and remembers
  /// `compensation(sql_session&, result)`, run the same way: for a saga
  /// whose steps are rows in the application's own database, each effect
  /// and each undo happens exactly once, crashes or not.
  template <class Action, class Compensation>
  auto transaction(std::string name, Action&& action,
                   Compensation&& compensation, retry_policy policy = {}) {
    perdure::detail::check_step_callable<Action>();
    perdure::detail::check_step_callable<Compensation>();
    refuse_while_compensating(name);
    using R = std::invoke_result_t<std::decay_t<Action>&, sql_session&>;
    return transaction_step<R>(
      std::move(name), std::decay_t<Action>{std::forward<Action>(action)},
      std::decay_t<Compensation>{std::forward<Compensation>(compensation)},
      policy);
  }

  /// Runs workflow `workflow`, itself a saga (`run`), with `input` as child
  /// step `name` and returns its result. If this saga compensates later,
  /// the child is undone as one step: a run replays the child's journal and
  /// compensates its completed steps in reverse (the compensation fails
  /// unless that run ends COMPENSATED).
  template <class R, class A>
  task<R> child(std::string name, std::string workflow, A input) {
    refuse_while_compensating(name);
    auto id = ctx_->workflow_id() + "." + name;
    std::optional<R> result;
    {
      auto shield = ctx_->shield_cancellation();
      auto started = co_await ctx_->start_child<R>(workflow, input, id);
      result = co_await started;
    }
    push_task(name, [this, id, workflow] { return undo_child(id, workflow); });
    co_return std::move(*result);
  }

  /// Runs `members` at once, as one durable step named `name` (each on a
  /// thread of its own, retried under `policy`), and waits for all of them.
  /// Every member that completed is remembered for compensation; if any
  /// failed, the group throws `terminal_error` naming them, after all
  /// settled. A crash before the group is recorded runs it all again.
  template <class R>
  task<std::vector<R>> all(std::string name, std::vector<member<R>> members,
                           retry_policy policy = {}) {
    refuse_while_compensating(name);
    auto body = [&members, policy] {
      std::vector<std::future<std::pair<std::optional<R>, std::string>>> runs;
      for (auto& m : members)
        runs.push_back(std::async(std::launch::async, [&m, policy] {
          return attempt_member(m, policy);
        }));
      detail::group_outcome<R> out;
      for (auto& r : runs) {
        auto [value, error] = r.get();
        out.results.push_back(std::move(value));
        out.errors.push_back(std::move(error));
      }
      return out;
    };
    auto out = co_await ctx_->step(name, body);
    std::string failures;
    std::vector<R> values;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (i < out.results.size() && out.results[i]) {
        auto comp = members[i].compensation;
        auto value = *out.results[i];
        push(name + "/" + members[i].name,
             [comp, value] { comp(value); });
        values.push_back(std::move(value));
      } else {
        failures += (failures.empty() ? "" : "; ") + members[i].name + ": "
                    + (i < out.errors.size() ? out.errors[i] : "no outcome");
      }
    }
    if (!failures.empty())
      throw terminal_error("parallel group '" + name + "' failed: "
                           + failures);
    co_return values;
  }

  /// Runs the compensations of the completed steps in reverse order, then
  /// ends the run: COMPENSATED if all succeeded, COMPENSATION_FAILED if not
  /// (throws `final_status_error` either way). `cause` is why.
  task<void> compensate(std::exception_ptr cause) {
    compensation_report report;
    report.cause = detail::describe(cause);
    compensating_ = true;
    co_await ctx_->enter_saga_phase(persistence::saga_phase::compensating);
    for (auto i = stack_.size(); i-- > 0;) {
      auto& undo = stack_[i];
      std::string error;
      if (undo.plain) {
        try {
          co_await ctx_->step("undo:" + undo.name, undo.plain,
                              opts_.compensation_policy);
        } catch (const std::exception& ex) {
          error = ex.what();
        }
      } else if (undo.in_transaction) {
        try {
          co_await ctx_->transaction("undo:" + undo.name, undo.in_transaction,
                                     opts_.compensation_policy);
        } catch (const std::exception& ex) {
          error = ex.what();
        }
      } else {
        // A compensation that is a task (object calls, children) records
        // its own operations: an empty step names them in the journal, so
        // that history() shows them as this step's undo, not forward calls.
        // (Left out where a journal written before the marker existed
        // has the task's own operation there.)
        auto marker = "undo:" + undo.name;
        if (!ctx_->recorded_otherwise(marker))
          co_await ctx_->step(marker, [] {}, opts_.compensation_policy);
        error = co_await run_task_undo(undo);
      }
      if (error.empty())
        report.undone.push_back(undo.name);
      else
        report.failed.emplace_back(undo.name, std::move(error));
    }
    throw final_status_error(report.failed.empty()
                               ? run_status::compensated
                               : run_status::compensation_failed,
                             report.to_text());
  }

private:
  /// A completed step's compensation, bound to its result.
  struct undo_entry {
    std::string name;
    std::function<void()> plain;
    std::function<task<void>()> as_task;
    std::function<void(sql_session&)> in_transaction;
  };

  void push(std::string name, std::function<void()> plain) {
    stack_.push_back({std::move(name), std::move(plain), {}, {}});
  }

  void push_task(std::string name, std::function<task<void>()> undo) {
    stack_.push_back({std::move(name), {}, std::move(undo), {}});
  }

  void push_transaction(std::string name,
                        std::function<void(sql_session&)> undo) {
    stack_.push_back({std::move(name), {}, {}, std::move(undo)});
  }

  template <class R, class Action, class Compensation>
  task<R> transaction_step(std::string name, Action action, Compensation comp,
                           retry_policy policy) {
    if constexpr (std::is_void_v<R>) {
      co_await ctx_->transaction(name, action, policy);
      push_transaction(name, [comp = std::move(comp)](sql_session& s) mutable {
        comp(s);
      });
    } else {
      auto result = co_await ctx_->transaction(name, action, policy);
      push_transaction(name, [comp = std::move(comp), result](
                               sql_session& s) mutable { comp(s, result); });
      co_return result;
    }
  }

  template <class R, class Action, class Compensation>
  task<R> plain_step(std::string name, Action action, Compensation comp,
                     retry_policy policy) {
    if constexpr (std::is_void_v<R>) {
      co_await ctx_->step(name, action, policy);
      bind(name, std::move(comp));
    } else {
      auto result = co_await ctx_->step(name, action, policy);
      bind(name, std::move(comp), result);
      co_return result;
    }
  }

  /// A task step (calls to objects, children) is not interrupted by a
  /// cancellation: what it started would be left undone, with no
  /// compensation known for it. It finishes; the next operation observes.
  template <class R, class Action, class Compensation>
  task<R> task_step(std::string name, Action action, Compensation comp) {
    if constexpr (std::is_void_v<R>) {
      {
        auto shield = ctx_->shield_cancellation();
        auto running = action();
        co_await std::move(running);
      }
      bind(name, std::move(comp));
    } else {
      std::optional<R> result;
      {
        auto shield = ctx_->shield_cancellation();
        auto running = action();
        result = co_await std::move(running);
      }
      bind(name, std::move(comp), *result);
      co_return std::move(*result);
    }
  }

  /// Remembers `comp` bound to `args` (the step's result, if any).
  template <class Compensation, class... Args>
  void bind(const std::string& name, Compensation comp, const Args&... args) {
    using returned = std::invoke_result_t<Compensation&, const Args&...>;
    if constexpr (detail::is_task<returned>::value)
      push_task(name, [comp = std::move(comp), args...]() mutable {
        return comp(args...);
      });
    else
      push(name, [comp = std::move(comp), args...]() mutable { comp(args...); });
  }

  /// Runs a compensation that is a task, retried with durable sleeps in
  /// between; returns its last error, empty if it succeeded.
  task<std::string> run_task_undo(undo_entry& undo) {
    auto& p = opts_.compensation_policy;
    auto delay = p.initial_delay;
    std::string error;
    for (std::int32_t attempt = 1;; ++attempt) {
      bool terminal = false;
      try {
        auto running = undo.as_task();
        co_await std::move(running);
        co_return std::string{};
      } catch (const terminal_error& ex) {
        error = ex.what();
        terminal = true;
      } catch (const std::exception& ex) {
        error = ex.what();
      }
      if (terminal || attempt >= p.max_attempts)
        co_return error;
      co_await ctx_->sleep(delay);
      delay = std::min(p.max_delay,
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                         delay * p.backoff));
    }
  }

  /// Undoes completed child saga `id` (see `child`).
  task<void> undo_child(std::string id, std::string workflow) {
    auto undo = co_await ctx_->start_undo<int>(id, workflow);
    std::string error;
    try {
      co_await undo;
    } catch (const terminal_error& ex) {
      error = ex.what();
    }
    // It ends COMPENSATED (an error, by design) when everything was undone.
    if (error.find(" ended COMPENSATED:") == std::string::npos)
      throw terminal_error(error.empty()
                             ? "the undo of '" + id + "' undid nothing"
                             : error);
  }

  template <class R>
  static std::pair<std::optional<R>, std::string>
  attempt_member(member<R>& m, const retry_policy& policy) {
    auto delay = policy.initial_delay;
    for (std::int32_t attempt = 1;; ++attempt) {
      try {
        return {m.action(), std::string{}};
      } catch (const terminal_error& ex) {
        return {std::nullopt, ex.what()};
      } catch (const std::exception& ex) {
        if (attempt >= policy.max_attempts)
          return {std::nullopt, ex.what()};
      }
      std::this_thread::sleep_for(delay);
      delay = std::min(policy.max_delay,
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                         delay * policy.backoff));
    }
  }

  /// A compensation asking for a forward step: refused (the stack is
  /// being undone, not grown).
  void refuse_while_compensating(const std::string& name) const {
    if (compensating_)
      throw terminal_error("saga '" + ctx_->workflow_id()
                           + "' is compensating: forward steps are refused ('"
                           + name + "')");
  }

  workflow_context* ctx_;
  saga_options opts_;
  std::vector<undo_entry> stack_;
  bool compensating_ = false;
};

/// Runs `body(saga&)` as a saga in the workflow run of `ctx` and returns
/// its result. If `body` throws (a step failed for good, or the saga was
/// cancelled or passed its deadline: `cancelled_error` at its next durable
/// operation, or at once while it waits), the completed steps are
/// compensated and the run ends COMPENSATED or COMPENSATION_FAILED. A
/// cancellation after the body returned comes too late for the saga: its
/// effects stand, and the workflow's code after `run` observes the
/// cancellation at its next durable operation (ending CANCELLED); a run
/// with nothing after `run` ends as its code returned.
template <class R, class Body>
task<R> run(workflow_context& ctx, Body body, saga_options opts = {}) {
  saga s{ctx, std::move(opts)};
  co_await ctx.enter_saga_phase(persistence::saga_phase::forward);
  std::exception_ptr failure;
  std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> result;
  try {
    auto running = body(s);
    if constexpr (std::is_void_v<R>) {
      co_await std::move(running);
      result = true;
    } else {
      result = co_await std::move(running);
    }
    // The end is a durable operation too: a cancellation before it undoes
    // everything.
    co_await ctx.enter_saga_phase(persistence::saga_phase::done);
  } catch (...) {
    failure = std::current_exception();
  }
  if (failure) {
    // Outside the handler: co_await is not allowed inside one.
    co_await s.compensate(failure);
  }
  if constexpr (!std::is_void_v<R>)
    co_return std::move(*result);
}

} // namespace perdure::sagas
