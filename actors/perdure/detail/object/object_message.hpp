#pragma once

// What an object actor is told, as one type (one handler, as for runs).

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "perdure/detail/execution/run_message.hpp"
#include "perdure/persistence/records.hpp"

namespace perdure::detail {

/// An invocation stored PENDING under the key's current epoch by this
/// process: it joins the queue.
struct invocation_arrived {
  persistence::run_record run;
};

/// Other processes stored invocations of this key (ENQUEUED): take them.
/// `handed`: sent by the directory (counted for passivation), not a retry.
struct inbox_news {
  bool handed = true;
  /// What the store holds for the key is unsure here (an invocation of it
  /// is PENDING under this process unseen): leave once nothing runs, so
  /// that the key is claimed again with all of it.
  bool reclaim = false;
};

/// What taking the ENQUEUED invocations found; nothing if the key is no
/// longer this actor's.
struct inbox_taken {
  std::optional<std::vector<persistence::run_record>> runs;
};

/// Invocation `run_id` was cancelled (in the store) while it was queued.
struct queued_cancel {
  std::string run_id;
};

/// The idle timer: leave memory if idle for `object_idle_timeout`.
struct idle_check {};

/// The key's state, at `version`, could not be decoded when it was claimed:
/// give the key up (sent to itself, as an actor does not quit while it
/// starts).
struct unreadable_state {
  std::int64_t version = 0;
};

/// The actor left the directory: quit once what is already in the mailbox
/// was handled.
struct quit_request {};

using object_message
  = std::variant<tagged_run_message, invocation_arrived, inbox_news,
                 inbox_taken, queued_cancel, idle_check, unreadable_state,
                 quit_request>;

} // namespace perdure::detail
