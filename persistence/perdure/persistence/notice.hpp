#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace perdure::persistence {

/// What one process tells the others through the store (PostgreSQL NOTIFY,
/// or SQLite's notices table), and what a process's listener tells itself.
/// Notices are hints: one lost is made good by sweeps and polls, so a
/// receiver ignores one it cannot parse. Encoded as the kind's character,
/// ':', then what it is about (an object's type and key are separated by
/// '\x1f'); the listener's own two are a single character.
struct notice {
  enum class kind : char {
    /// Something was delivered to run `id` (a message, a resolution, a
    /// child's or a call's end): its owner wakes it.
    run_woken = 'w',
    /// Run `id` was cancelled: whoever runs it stops it.
    run_cancelled = 'c',
    /// Saga `id` was asked to cancel: its owner compensates.
    saga_cancelling = 'k',
    /// A client started run `id`: whoever can run it adopts it.
    run_created = 'n',
    /// Executor `id` lapsed or stopped: its runs are up for takeover.
    executor_gone = 'x',
    /// Items were enqueued in queue `id`, or came back to it.
    queue_has_items = 'q',
    /// Invocations were stored for the object of type `id` and key `key`.
    object_has_calls = 'o',
    /// The listener's own: it (re)connected, and anything sent before may
    /// have been missed -- look at everything waiting, in memory too.
    missed = '!',
    /// The listener's own, every few seconds: a sender may have crashed
    /// before its notice -- look at the store for what is due.
    sweep_due = '*',
  };

  kind what;
  std::string id;
  std::string key; ///< object_has_calls only

  static notice woken(std::string run) { return {kind::run_woken, std::move(run), {}}; }
  static notice cancelled(std::string run) { return {kind::run_cancelled, std::move(run), {}}; }
  static notice saga_cancel(std::string run) { return {kind::saga_cancelling, std::move(run), {}}; }
  static notice created(std::string run) { return {kind::run_created, std::move(run), {}}; }
  static notice gone(std::string executor) { return {kind::executor_gone, std::move(executor), {}}; }
  static notice queued(std::string queue) { return {kind::queue_has_items, std::move(queue), {}}; }
  static notice calls(std::string type, std::string key) {
    return {kind::object_has_calls, std::move(type), std::move(key)};
  }

  std::string encode() const;

  /// Nothing for text no Perdure wrote (an unknown kind, a missing id or
  /// key).
  static std::optional<notice> parse(std::string_view text);

  /// What starts the encoding of `k`'s notices ("q:"): for SQL that builds
  /// them in the statement that stores what they announce.
  static std::string prefix(kind k);
};

} // namespace perdure::persistence
