#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "perdure/error.hpp"
#include "perdure/persistence/codec.hpp"
#include "perdure/run_status.hpp"

namespace perdure {

namespace detail {

class runtime_impl;

/// The end of a run, as stored.
struct run_outcome {
  run_status status = run_status::pending;
  std::optional<std::string> output;
  std::optional<std::string> error;
};

/// Blocks until run `id` has ended or `timeout` passed (then throws
/// `errc::timeout`). Throws `errc::not_found` for an unknown id.
run_outcome await_run(runtime_impl& rt, const std::string& id,
                      std::chrono::milliseconds timeout);

/// Returns the stored status of run `id`; throws `errc::not_found`.
run_status status_of(runtime_impl& rt, const std::string& id);

/// Cancels run `id` (see `runtime::cancel`).
void cancel_run(runtime_impl& rt, const std::string& id);

/// Calls `done` once run `id` ended (see `workflow_handle::when_done`).
void on_run_end(runtime_impl& rt, const std::string& id,
                std::function<void()> done);

/// Throws the error that ends a run with a status other than SUCCESS.
[[noreturn]] void throw_run_failure(const std::string& id,
                                    const run_outcome& outcome);

} // namespace detail

/// Refers to one workflow run by id, in this process or any other sharing the
/// database. Cheap to copy.
template <class R>
class workflow_handle {
public:
  workflow_handle(std::shared_ptr<detail::runtime_impl> rt, std::string id)
    : rt_(std::move(rt)), id_(std::move(id)) {
  }

  /// Returns the workflow id.
  const std::string& id() const noexcept {
    return id_;
  }

  /// Cancels the run and its children (see `runtime::cancel`).
  void cancel() const {
    detail::cancel_run(*rt_, id_);
  }

  /// Returns the run's current status, read from the store.
  run_status status() const {
    return detail::status_of(*rt_, id_);
  }

  /// Waits for the run to end and returns its output. Throws
  /// `perdure::error` with `errc::workflow_failed`, `workflow_cancelled` or
  /// `retries_exceeded` if it did not succeed, and `errc::timeout` if it is
  /// still running after `timeout`.
  /// Calls `done(*this)` once the run ended, without holding a thread
  /// meanwhile: inside, `get()` returns (or throws) at once. It runs on a
  /// thread of the runtime (or client) shared by every callback: keep it
  /// short, hand longer work on. Callbacks of runs not ended when the
  /// runtime stops are dropped.
  void when_done(std::function<void(const workflow_handle&)> done) const {
    detail::on_run_end(*rt_, id_,
                       [h = *this, done = std::move(done)] { done(h); });
  }

  R get(std::chrono::milliseconds timeout
        = std::chrono::milliseconds::max()) const {
    auto outcome = detail::await_run(*rt_, id_, timeout);
    if (outcome.status != run_status::success)
      detail::throw_run_failure(id_, outcome);
    if constexpr (!std::is_void_v<R>)
      return persistence::decode<R>(outcome.output.value_or(std::string{}));
  }

private:
  std::shared_ptr<detail::runtime_impl> rt_;
  std::string id_;
};

} // namespace perdure
