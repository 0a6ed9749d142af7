#pragma once

// Which keys have an actor in this process, and how an invocation reaches
// its key's actor: handed in memory when the key is active here, else
// claimed from the store (the key is free, ours, or its holder gone), else
// announced to the process holding it.

#include <caf/actor.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "perdure/persistence/records.hpp"

namespace perdure::detail {

struct runtime_services;

class object_directory {
public:
  explicit object_directory(runtime_services& rt);

  /// Fills in `run`'s status and owner (PENDING under the key's epoch if
  /// the key is active here, else ENQUEUED) before it is stored; returns
  /// the actor to hand it to once stored, if any.
  std::optional<caf::actor> prepare(persistence::run_record& run);

  /// `run` is stored (with its status as stored): hands it to `to` if it
  /// is PENDING and `to` is still the key's actor at the run's epoch, else
  /// makes sure the key's holder takes it from the inbox.
  void deliver(const std::optional<caf::actor>& to,
               persistence::run_record run);

  /// `deliver`'s way in memory only: hands `run` to `to` and returns true,
  /// or leaves `run` as it was and returns false (then `reach` the key,
  /// which may block on the store: not on a writer's thread).
  bool hand(const std::optional<caf::actor>& to, persistence::run_record& run);

  /// Makes sure the key's invocations in the store reach its holder: tells
  /// the actor here, or claims the key (free, ours, or its holder gone),
  /// or, if `announce`, tells the process holding it.
  void reach(const std::string& type, const std::string& key, bool announce);

  /// An invocation of the key is PENDING under this process and no actor
  /// here holds it: the key is claimed again (its actor here, if any,
  /// leaves first), which takes every unended invocation of it.
  void reclaim(const std::string& type, const std::string& key);

  /// Claims the keys with unended invocations that nobody live holds, and
  /// this process's own with invocations unseen; `at_start`: all of its
  /// own (nothing of them runs here yet).
  void recover(bool at_start = false);

  /// The key's actor `actor` left; `revive`: claim the key again soon.
  void stopped(const std::string& type, const std::string& key,
               const caf::actor& actor, bool revive);

  /// The key's actor `actor` gives the key up: its next call is not one
  /// this process can run, or (`unreadable_version`) the key's state at
  /// that version is not one its code can read (the key is not claimed
  /// here again until another process wrote it).
  void give_up(const std::string& type, const std::string& key,
               const caf::actor& actor,
               std::optional<std::int64_t> unreadable_version);

  /// Giving the key up could not be written: it is claimed again soon.
  void retry_give_up(const std::string& type, const std::string& key);

  /// The key's actor `actor`, idle, asks to leave memory, having received
  /// `received` invocations handed to it: true if none is on its way.
  bool try_passivate(const std::string& type, const std::string& key,
                     const caf::actor& actor, std::uint64_t received);

  /// Claims again the keys whose actors left in doubt, when due.
  void revive_due();

  /// Returns whether keys wait for `revive_due` now.
  bool revival_due();

  /// Returns the actors in memory (to stop them).
  std::vector<caf::actor> actors();

  /// The lease is lost: forgets every key here (returning their actors, to
  /// stop) and remembers them for `revive_dropped`.
  std::vector<caf::actor> drop_all();

  /// The lease is back: claims the keys `drop_all` forgot.
  void revive_dropped();

  /// Returns how many keys have an actor here.
  std::size_t size();

private:
  struct entry {
    caf::actor actor;
    std::int64_t epoch = 0;
    std::uint64_t handed = 0;
  };

  static std::string id_of(const std::string& type, const std::string& key);

  /// Claims the key and spawns its actor; returns whether it is active here.
  bool activate(const std::string& type, const std::string& key);

  runtime_services& rt_;
  std::mutex mtx_;
  std::condition_variable settled_;
  std::unordered_map<std::string, entry> active_;
  std::unordered_set<std::string> activating_;
  std::unordered_map<std::string, std::pair<std::string, std::string>> orphans_;
  std::unordered_map<std::string, std::pair<std::string, std::string>> dropped_;
  /// Keys given up for a state this code cannot read, at that version.
  std::unordered_map<std::string, std::int64_t> unreadable_;
  /// (type, key) of each active key, by id.
  std::unordered_map<std::string, std::pair<std::string, std::string>> names_;
  std::chrono::steady_clock::time_point orphans_due_;
};

} // namespace perdure::detail
