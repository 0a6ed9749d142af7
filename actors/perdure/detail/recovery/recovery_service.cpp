#include "perdure/detail/recovery/recovery_service.hpp"

#include <unordered_set>

#include "perdure/detail/execution/run_message.hpp"
#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/metrics/runtime_metrics.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/object/object_directory.hpp"
#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/runs/deadlines.hpp"
#include "perdure/detail/runs/run_launcher.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/admin_store.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/detail/timer/timer_service.hpp"
#include "perdure/persistence/notice.hpp"

namespace perdure::detail {

void recovery_service::reset() {
  std::lock_guard guard{mtx_};
  taking_over_ = false;
  take_over_again_ = false;
  // Until the start's recovery claimed this executor's own runs, nothing
  // claims for it (see `recover`).
  recovering_ = true;
  adopt_after_recovery_.clear();
  stranded_suspects_.clear();
  stranded_busy_ = false;
  stranded_due_ = std::chrono::steady_clock::now() + svc_.cfg.stranded_check;
}

void recovery_service::recover() {
  // At start (`reset` set `recovering_`; notices are heard only after
  // it), a takeover asked for meanwhile (a lapse the lease saw) runs after
  // it: run alongside, it claimed a run this recovery then claimed again
  // as its own, and both copies ran its step (seen once in ctest under
  // load). A recovery after the lease came back runs beside the rest as
  // before; two recoveries take turns.
  std::lock_guard one_at_a_time{recovery_mtx_};
  bool at_start = recovering();
  struct then_take_over {
    recovery_service& rs;
    bool at_start;
    ~then_take_over() {
      if (!at_start)
        return;
      bool again = false;
      std::vector<std::string> adopt;
      {
        std::lock_guard guard{rs.mtx_};
        rs.recovering_ = false;
        again = std::exchange(rs.take_over_again_, false);
        adopt.swap(rs.adopt_after_recovery_);
      }
      for (auto& id : adopt)
        rs.take_over(std::move(id));
      if (again)
        rs.take_over();
    }
  } after{*this, at_start};
  auto& cfg = svc_.cfg;
  // Runs of this id it cannot run (restarted without their workflow, or
  // at another version) go to processes that can.
  auto released = svc_.admin->with([&](persistence::store& db) {
    auto n = db.release_unclaimable(cfg.executor_id, svc_.run_filter);
    if (n > 0)
      db.notify(persistence::notice::gone(cfg.executor_id));
    return n;
  });
  if (released > 0)
    svc_.log().info("perdure: executor '{}' gives up {} PENDING runs it "
                    "cannot run (their workflow is not registered here, or "
                    "another app version started them)",
                    cfg.executor_id, released);
  auto runs = svc_.admin->with([&](persistence::store& db) {
    return db.claim_pending_runs(cfg.executor_id, svc_.run_filter,
                                 svc_.clock->now_ms());
  });
  if (!runs.empty())
    svc_.log().info("perdure: recovering {} pending runs of executor '{}'",
                    runs.size(), cfg.executor_id);
  svc_.metrics.recoveries.add(runs.size());
  bring_in(std::move(runs));
  take_over_now(std::nullopt); // what died with other processes meanwhile
}

void recovery_service::bring_in(std::vector<persistence::run_record> runs) {
  auto now = svc_.clock->now_ms();
  // Passivated runs stay out of memory: their timer brings them back (a
  // delivery marks the wake-up time 0, so those are loaded now). Deadlines
  // of runs in memory are armed by spawn_run.
  std::erase_if(runs, [&](const persistence::run_record& run) {
    if (!run.wake_at_ms || *run.wake_at_ms <= now)
      return false;
    if (run.deadline_ms)
      svc_.deadlines->arm(run.id, *run.deadline_ms);
    if (*run.wake_at_ms < passivated_forever)
      svc_.timers->schedule({*run.wake_at_ms, run.id, -1});
    return true;
  });
  svc_.launcher->count_queue_restarts(runs);
  constexpr std::size_t chunk = 512;
  for (std::size_t first = 0; first < runs.size(); first += chunk) {
    auto last = std::min(runs.size(), first + chunk);
    std::vector<std::string> ids;
    for (auto i = first; i < last; ++i)
      ids.push_back(runs[i].id);
    std::vector<persistence::journal_entry> entries;
    try {
      entries = svc_.stores->with(
        [&](persistence::store& db) { return db.load_journals(ids); });
    } catch (...) {
      // Claimed, so PENDING here, and nobody else looks at them: they are
      // this process's orphans, revived (claim and load again) soon.
      for (auto i = first; i < runs.size(); ++i)
        svc_.runs->orphaned(runs[i].id, false);
      throw;
    }
    std::unordered_map<std::string, std::vector<persistence::journal_entry>>
      journals;
    for (auto& e : entries)
      journals[e.run_id].push_back(std::move(e));
    for (auto i = first; i < last; ++i) {
      auto journal = std::move(journals[runs[i].id]);
      svc_.launcher->spawn_run(std::move(runs[i]), std::move(journal));
    }
  }
}

void recovery_service::take_over(std::optional<std::string> only) {
  if (svc_.client_mode)
    return;
  // Posted under the registry's lock: stop() lets the executor go only
  // after closing the registry.
  svc_.runs->if_live([&] {
    {
      std::lock_guard guard{mtx_};
      if (recovering_) { // after the recovery (see `recover`)
        if (only)
          adopt_after_recovery_.push_back(std::move(*only));
        else
          take_over_again_ = true;
        return;
      }
      if (!only && taking_over_) { // once more when this one ends
        take_over_again_ = true;
        return;
      }
      if (!only)
        taking_over_ = true;
    }
    if (only) {
      svc_.control->post(
        [this, id = std::move(*only)] { take_over_now(id); });
      return;
    }
    svc_.control->post([this] {
      for (;;) {
        take_over_now(std::nullopt);
        try {
          svc_.objects->recover(); // keys of the gone, and keys nobody claimed
        } catch (const std::exception& ex) {
          svc_.log().warn("perdure: claiming objects failed ({}); trying "
                          "again later",
                          ex.what());
        }
        auto running = svc_.runs->running();
        std::lock_guard guard{mtx_};
        if (recovering_ || !std::exchange(take_over_again_, false)
            || !running) { // (a recovery takes over after it)
          taking_over_ = false;
          return;
        }
      }
    });
  });
}

void recovery_service::take_over_now(const std::optional<std::string>& only) {
  auto& cfg = svc_.cfg;
  try {
    // Each pass takes this process's share of what is left; passes go on
    // while there is some, so live processes spread the runs between them.
    for (int pass = 0; pass < 64; ++pass) {
      if (!svc_.runs->live())
        return;
      auto runs = svc_.stores->with([&](persistence::store& db) {
        return db.take_over(cfg.executor_id, svc_.run_filter,
                            only ? std::optional<std::string_view>{*only}
                                 : std::nullopt,
                            svc_.clock->now_ms());
      });
      if (runs.empty())
        break;
      svc_.metrics.takeovers.add(runs.size());
      if (!only)
        svc_.log().info("perdure: executor '{}' took over {} runs of stopped "
                        "or lapsed executors",
                        cfg.executor_id, runs.size());
      bring_in(std::move(runs));
      if (only)
        return;
    }
    if (!only) {
      retry_blocked();
      // Its report scans every unended run: at most once a lease (full
      // passes come with every executor_gone notice, and move_runs sends
      // one), not once a pass on every process.
      auto now = std::chrono::steady_clock::now();
      if (now >= versions_due_) {
        versions_due_ = now + svc_.cfg.lease_timeout;
        watch_versions();
      }
    }
    count_left();
  } catch (const std::exception& ex) {
    svc_.log().warn("perdure: taking over runs failed ({}); trying again "
                    "later",
                    ex.what());
  }
}

void recovery_service::retry_blocked() {
  auto runs = svc_.stores->with([&](persistence::store& db) {
    return db.claim_blocked(svc_.cfg.executor_id, svc_.run_filter,
                            svc_.started_at_ms, 256);
  });
  if (runs.empty())
    return;
  svc_.log().info("perdure: executor '{}' tries again {} BLOCKED runs (a "
                  "process started before it could not replay them)",
                  svc_.cfg.executor_id, runs.size());
  bring_in(std::move(runs));
}

void recovery_service::watch_versions() {
  auto& cfg = svc_.cfg;
  std::vector<version_report> versions;
  try {
    versions = svc_.stores->with([&](persistence::store& db) {
      db.note_version(cfg.app_version, svc_.clock->now_ms());
      return db.versions();
    });
  } catch (const std::exception& ex) {
    svc_.log().warn("perdure: could not read the app versions ({}); trying "
                    "again at the next takeover pass",
                    ex.what());
    return;
  }
  std::int64_t stranded = 0;
  std::string which;
  for (auto& v : versions)
    if (v.stranded) {
      auto n = v.pending + v.enqueued + v.blocked;
      stranded += n;
      which += (which.empty() ? "" : ", ") + std::to_string(n) + " of '"
               + v.app_version + "'";
    }
  if (stranded_.exchange(stranded) != stranded && stranded > 0)
    svc_.log().warn("perdure: runs stranded on app versions no live process "
                    "runs: {}. Deploy that version, or move them to one that "
                    "replays them (client::move_runs)",
                    which);
}

void recovery_service::count_left() {
  auto& cfg = svc_.cfg;
  auto left = svc_.stores->with([&](persistence::store& db) {
    return db.count_unclaimable(cfg.executor_id, svc_.run_filter);
  });
  if (left_pending_.exchange(left) != left && left > 0)
    svc_.log().info("perdure: executor '{}' leaves {} PENDING runs to "
                    "processes that can run them (their workflow is not "
                    "registered here, or they were started by another app "
                    "version)",
                    cfg.executor_id, left);
}

bool recovery_service::recovering() {
  std::lock_guard guard{mtx_};
  return recovering_;
}

bool recovery_service::stranded_check_due(
  std::chrono::steady_clock::time_point now) {
  std::lock_guard guard{mtx_};
  if (stranded_busy_ || now < stranded_due_)
    return false;
  stranded_busy_ = true;
  return true;
}

void recovery_service::check_stranded() {
  struct next_check {
    recovery_service& rs;
    ~next_check() {
      std::lock_guard guard{rs.mtx_};
      rs.stranded_busy_ = false;
      rs.stranded_due_ = std::chrono::steady_clock::now()
                         + rs.svc_.cfg.stranded_check;
    }
  } next{*this};
  auto& cfg = svc_.cfg;
  try {
    // What this process holds or is about to: actors, revivals, orphans
    // due for one, items claimed ahead of their workers.
    auto claimed_ahead = [&] {
      std::unordered_set<std::string> ids;
      if (svc_.queues)
        svc_.queues->claimed_ahead(ids);
      return ids;
    };
    auto now = svc_.clock->now_ms();
    auto stored = svc_.stores->with([&](persistence::store& db) {
      return db.count_awake_pending(cfg.executor_id, now);
    });
    auto held = claimed_ahead().size() + svc_.runs->held_count();
    if (stored <= static_cast<std::int64_t>(held)) {
      std::lock_guard guard{mtx_};
      stranded_suspects_.clear();
      return;
    }
    auto listed = svc_.stores->with([&](persistence::store& db) {
      return db.list_awake_pending(cfg.executor_id, now);
    });
    auto ahead = claimed_ahead(); // as of now, after the list
    std::vector<std::pair<std::string, std::int64_t>> ids;
    for (auto& p : listed)
      ids.emplace_back(p.id, p.epoch);
    auto unheld = svc_.runs->unheld(ids, ahead);
    if (!unheld)
      return;
    std::unordered_map<std::string, std::int64_t> missing_ids;
    {
      std::lock_guard guard{mtx_};
      std::unordered_map<std::string, std::int64_t> suspects;
      for (auto& [id, epoch] : *unheld) {
        auto s = stranded_suspects_.find(id);
        if (s != stranded_suspects_.end() && s->second == epoch)
          missing_ids.emplace(id, epoch);
        else
          suspects.emplace(id, epoch);
      }
      stranded_suspects_ = std::move(suspects);
    }
    if (missing_ids.empty())
      return;
    svc_.log().warn("perdure: executor '{}' holds {} PENDING runs or calls "
                    "with no actor (a claim whose commit reply was lost, or "
                    "a load that failed after its claim); bringing them back",
                    cfg.executor_id, missing_ids.size());
    for (auto& p : listed) {
      if (missing_ids.count(p.id) == 0)
        continue;
      if (p.object_type.empty())
        svc_.launcher->revive(p.id, run_launcher::revival::lost);
      else if (svc_.object_types.count(p.object_type) > 0)
        svc_.objects->reclaim(p.object_type, p.object_key);
    }
  } catch (const std::exception& ex) {
    svc_.log().warn("perdure: looking for stranded work failed ({}); trying "
                    "again later",
                    ex.what());
  }
}

} // namespace perdure::detail
