#include "perdure/detail/runs/run_launcher.hpp"

#include <caf/actor_system.hpp>
#include <caf/logger.hpp>

#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/metrics/runtime_metrics.hpp"
#include "perdure/detail/object/object_actor.hpp"
#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/runs/deadlines.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/detail/workflow/run_actor.hpp"
#include "perdure/detail/timer/clock.hpp"
#include "perdure/persistence/journal_writer.hpp"

namespace perdure::detail {

namespace {

/// CAF 0.17 parks a reference to its logger in a thread-local of every
/// thread that spawns an actor, and ~actor_system waits until the logger
/// dies: threads drop theirs at once, so the runtime can stop from any
/// thread.
void forget_caf_logger() {
  caf::logger::set_current_actor_system(nullptr);
}

} // namespace

void run_launcher::count_queue_restarts(
  const std::vector<persistence::run_record>& runs) {
  std::vector<std::string> queues;
  for (auto& run : runs)
    if (!run.queue_name.empty())
      queues.push_back(run.queue_name);
  if (queues.empty())
    return;
  try {
    svc_.stores->with(
      [&](persistence::store& db) { db.record_queue_starts(queues); });
  } catch (const std::exception& ex) {
    svc_.log().warn("perdure: could not count {} restarted queue items "
                    "against their rate limits ({}); a few more may start in "
                    "this window",
                    queues.size(), ex.what());
  }
}

void run_launcher::wake(const std::string& id, std::int32_t seq) {
  if (svc_.client_mode)
    return; // a client has no runs in memory: announce() tells the owner
  // Posted under the registry's lock: stop() closes it before it lets the
  // executor go, so the executor outlives this post.
  svc_.runs->wake(id, seq,
                  [&] { svc_.control->post([this, id] { revive(id); }); });
}

void run_launcher::revive(const std::string& id, revival why) {
  if (svc_.client_mode)
    return; // a client runs nothing: the owner's sweep revives it
  bool count_attempt = why == revival::crashed;
  if (!svc_.runs->begin_revival(id, why == revival::wake))
    return;
  struct done_reviving {
    run_registry& runs;
    const std::string& id;
    ~done_reviving() {
      runs.end_revival(id);
    }
  } guard{*svc_.runs, id};
  try {
    auto run = svc_.stores->with([&](persistence::store& db) {
      return db.claim_run(id, svc_.cfg.executor_id, svc_.run_filter,
                          count_attempt, why != revival::wake);
    });
    if (!run)
      return; // ended, or not ours
    if (count_attempt) // a restart after a crash
      count_queue_restarts({*run});
    auto journal = svc_.stores->with(
      [&](persistence::store& db) { return db.load_journals({id}); });
    spawn_run(std::move(*run), std::move(journal));
  } catch (const std::exception& ex) {
    svc_.log().warn("perdure: could not bring run {} back ({}); trying "
                    "again soon",
                    id, ex.what());
    svc_.runs->orphaned(id, false);
  }
}

void run_launcher::revive_orphans() {
  auto ids = svc_.runs->take_orphans();
  svc_.log().info("perdure: reviving {} runs left without an actor",
                  ids.size());
  // A crashed actor counts as a recovery (a run that crashes its actor
  // every time must end); a store outage does not (a long-lived run may
  // see many). A failure makes the run an orphan again.
  for (auto& [id, crashed] : ids)
    revive(id, crashed ? revival::crashed : revival::lost);
  svc_.runs->orphans_done();
}

std::optional<caf::actor>
run_launcher::spawn_run(persistence::run_record run,
                        std::vector<persistence::journal_entry> journal) {
  auto& cfg = svc_.cfg;
  if (run.recovery_attempts > cfg.max_recovery_attempts) {
    // A run that takes its process (or its actor) down at every start.
    persistence::completion_write c;
    c.run_id = run.id;
    c.owner = run.owner;
    c.status = run_status::retries_exceeded;
    c.error = "recovered " + std::to_string(run.recovery_attempts)
              + " times, more than the limit of "
              + std::to_string(cfg.max_recovery_attempts);
    c.at_ms = now_ms();
    run_outcome outcome{c.status, std::nullopt, c.error};
    svc_.writer->complete(std::move(c), [this, run = std::move(run), outcome](
                                          persistence::write_result r) {
      auto& id = run.id;
      if (r.ack == persistence::write_ack::failed) {
        svc_.runs->orphaned(id, false); // tried again by housekeeping
        return;
      }
      if (r.ack != persistence::write_ack::committed)
        return;
      if (svc_.cfg.metrics)
        svc_.metrics.ended_without_execution(run, outcome.status, now_ms());
      svc_.run_stopped(id, outcome);
      if (run.parent_id) // it may be waiting for this end
        wake(*run.parent_id, -1);
    });
    return std::nullopt;
  }
  if (svc_.workflows.count(run.name) == 0) {
    // Claims filter these out; a run that slips through stays PENDING
    // for a process that knows its workflow (never ERROR for lacking it).
    svc_.log().warn("perdure: run {} is of workflow '{}', not registered "
                    "here; left PENDING",
                    run.id, run.name);
    return std::nullopt;
  }
  auto id = run.id;
  auto epoch = run.owner.epoch;
  auto actor = svc_.runs->admit(id, epoch, [&] {
    if (run.deadline_ms)
      svc_.deadlines->arm(run.id, *run.deadline_ms);
    auto queue = run.queue_name;
    svc_.log().debug("perdure: run {} starts here at epoch {} with {} "
                     "journal entries",
                     id, epoch, journal.size());
    auto a = spawn_run_actor(*svc_.system, svc_, std::move(run),
                             std::move(journal));
    if (!queue.empty() && svc_.queues)
      svc_.queues->holding(queue, id, a);
    return a;
  });
  forget_caf_logger();
  return actor;
}

std::optional<caf::actor> run_launcher::spawn_object(object_activation a) {
  std::optional<caf::actor> actor;
  svc_.runs->if_live(
    [&] { actor = spawn_object_actor(*svc_.system, svc_, std::move(a)); });
  forget_caf_logger();
  return actor;
}

} // namespace perdure::detail
