#include "perdure/runtime.hpp"

#include <caf/atom.hpp>
#include <caf/logger.hpp>
#include <caf/send.hpp>

#include <spdlog/spdlog.h>

#include <future>
#include <thread>

#include "perdure/detail/awaiters.hpp"
#include "perdure/detail/clock.hpp"
#include "perdure/detail/workflow/run_actor.hpp"
#include "perdure/detail/runtime_impl.hpp"
#include "perdure/detail/time_math.hpp"
#include "perdure/persistence/text.hpp"

namespace perdure {

namespace {

/// Returns how often a runtime renews its lease: a quarter of its timeout,
/// at most every 250 ms (a dead holder is declared lapsed after missing a
/// second of them, so this bounds how soon its runs are taken over).
std::chrono::milliseconds heartbeat_interval(const config& cfg) {
  return std::clamp(cfg.lease_timeout / 4, std::chrono::milliseconds{10},
                    std::chrono::milliseconds{250});
}

} // namespace

// -- runtime_impl ---------------------------------------------------------------

namespace {

/// CAF 0.17 parks a reference to its logger in a thread-local of every
/// thread that builds the system or spawns an actor, and ~actor_system waits
/// until the logger dies: application threads drop theirs at once, so the
/// runtime can stop from any thread.
void forget_caf_logger() {
  caf::logger::set_current_actor_system(nullptr);
}

} // namespace

namespace detail {


runtime_impl::runtime_impl(config c, bool client)
  : cfg(std::move(c)), client_mode(client),
    clock(cfg.clock ? cfg.clock : perdure::system_clock()),
    instance_(random_id()),
    logger_(cfg.logger ? cfg.logger : spdlog::default_logger()) {
  // Before the lease's heartbeats, which may drop its keys.
  objects = std::make_unique<object_directory>(*this);
  if (cfg.executor_id.empty())
    cfg.executor_id = process_executor_id();
}

runtime_impl::~runtime_impl() {
  stop();
}

persistence::store_options runtime_impl::store_options() const {
  // A runtime stalled inside a transaction for longer than its lease has
  // lost the lease anyway: the server ends the session (after twice the
  // lease), so its runs' row locks do not keep the takeover away.
  return {.url = cfg.database_url,
          .schema = cfg.schema,
          .retry_budget = cfg.db_retry_budget,
          .lease_epoch = lease_epoch_,
          .idle_transaction_timeout = client_mode
                                        ? std::chrono::milliseconds{0}
                                        : 2 * cfg.lease_timeout};
}

bool runtime_impl::running() const {
  std::lock_guard guard{active_mtx_};
  return running_;
}

void runtime_impl::start_client() {
  auto opts = store_options();
  control_ = persistence::open_store(opts);
  control_->migrate();
  stores = std::make_unique<store_pool>(opts, cfg.pooled_connections);
  {
    std::lock_guard guard{active_mtx_};
    running_ = true;
  }
  gate_.open();
}

void runtime_impl::start() {
  if (running())
    return;
  if (client_mode) {
    start_client();
    return;
  }
  auto opts = store_options();
  {
    std::lock_guard guard{control_mtx_};
    control_ = persistence::open_store(opts);
    try {
      control_->migrate();
    } catch (...) {
      control_.reset();
      throw;
    }
  }
  filter_.names.clear();
  for (auto& [name, entry] : workflows)
    filter_.names.push_back(name);
  filter_.app_version = cfg.app_version;
  object_filter.types.clear();
  for (auto& [type, entry] : object_types) {
    auto& [name, handlers] = object_filter.types.emplace_back();
    name = type;
    for (auto& [handler, h] : entry.handlers)
      handlers.push_back(handler);
  }
  object_filter.app_version = cfg.app_version;
  {
    // A runtime object started again: nothing of its last life counts
    // (its timers and its takeover job went with it).
    std::lock_guard guard{active_mtx_};
    lease_lost_ = false;
    fenced_.clear();
    armed_deadlines_.clear();
    deadline_retries_.clear();
    orphans_.clear();
    orphans_busy_ = false;
    orphan_backoff_ = std::chrono::milliseconds{0};
    stranded_suspects_.clear();
    stranded_busy_ = false;
    stranded_due_ = std::chrono::steady_clock::now() + cfg.stranded_check;
    taking_over_ = false;
    take_over_again_ = false;
  }
  try {
    // First the lease: a second process with this id changes nothing.
    lease_ = std::make_unique<executor_lease>(
      opts, lease_epoch_,
      persistence::lease_request{.executor = cfg.executor_id,
                                 .instance = instance_,
                                 .app_version = cfg.app_version,
                                 .timeout_ms = cfg.lease_timeout.count()},
      log());
    lease_->acquire();
    // Heartbeats from now on: a long recovery must not let the lease lapse
    // (what they trigger waits for `running_`).
    lease_->start_heartbeats(
      heartbeat_interval(cfg),
      {.lost = [this] { lose_lease(); },
       .regained = [this] { regain_lease(); },
       .renewed = [this](std::size_t declared) {
         // Now and then, whatever is left for this process too (runs whose
         // workflow no live process had, runs a client started unheard).
         if (declared > 0 || ++beats_ % 20 == 0)
           take_over();
       }});
  } catch (...) {
    lease_.reset();
    std::lock_guard guard{control_mtx_};
    control_.reset();
    throw;
  }
  try {
    start_holding_lease(opts);
  } catch (...) {
    {
      std::lock_guard guard{active_mtx_};
      running_ = false;
    }
    gate_.close_and_wait(); // application threads may be in calls already
    shut_down(); // gives the lease up again
    throw;
  }
}

void runtime_impl::start_holding_lease(const persistence::store_options& opts) {
  std::vector<std::unique_ptr<persistence::store>> journal;
  auto writers = std::string_view{control_->dialect()} == "sqlite"
                   ? std::size_t{1}
                   : std::max<std::size_t>(1, cfg.journal_connections);
  for (std::size_t i = 0; i < writers; ++i)
    journal.push_back(persistence::open_store(opts));
  writer = std::make_unique<persistence::journal_writer>(
    std::move(journal), persistence::journal_writer::options{});
  steps = std::make_unique<step_executor>(cfg.step_threads, this);
  control = std::make_unique<step_executor>(
    std::max<std::size_t>(1, cfg.control_threads), this);
  stores = std::make_unique<store_pool>(opts, cfg.pooled_connections);
  tx_stores = std::make_unique<store_pool>(opts, cfg.step_threads);
  system_cfg = std::make_unique<caf::actor_system_config>();
  system_cfg->set("scheduler.max-threads", cfg.scheduler_threads);
  system_cfg->set("scheduler.max-throughput", std::size_t{300});
  system_cfg->set("scheduler.policy", caf::atom("sharing"));
  system = std::make_unique<caf::actor_system>(*system_cfg);
  forget_caf_logger();
  timers = std::make_unique<timer_service>(clock, [this](const timer& t) {
    if (t.seq == deadline_seq) {
      std::lock_guard guard{active_mtx_};
      if (auto i = armed_deadlines_.find(t.run_id);
          i != armed_deadlines_.end() && i->second == t.due_ms)
        armed_deadlines_.erase(i);
      if (running_)
        control->post([this, id = t.run_id, due = t.due_ms] {
          deadline_passed(id, due);
        });
    } else
      wake(t.run_id, t.seq);
  });
  {
    std::lock_guard guard{active_mtx_};
    running_ = true;
  }
  gate_.open();
  // Listening before any run looks at the store: a delivery committed
  // after a run's look is then heard of.
  listener = persistence::listen_for_deliveries(
    opts, [this](const persistence::notice& n) { on_notice(n); });
  recover();
  objects->recover(true);
  if (queues) // after recovery: what it claims is not this process's yet
    queues->start();
  housekeeper_ = std::make_unique<ticker>(std::chrono::milliseconds{100},
                                          [this] { housekeeping(); });
}

void runtime_impl::on_notice(const persistence::notice& n) {
  using kind = persistence::notice::kind;
  std::lock_guard guard{active_mtx_};
  if (!running_)
    return; // stop() lets the executors go only after clearing running_
  switch (n.what) {
    case kind::sweep_due:
      control->post([this] { sweep(); });
      break;
    case kind::missed:
      // Runs in memory may have missed theirs too: each looks again; so do
      // the keys held here (calls from other processes).
      for (auto& [id, a] : active_)
        signal_run(a.actor, a.exec, run_signal::wake, -1);
      control->post([this] { sweep(); });
      take_over_locked(std::nullopt);
      break;
    case kind::run_woken:
      if (auto i = active_.find(n.id); i != active_.end()) {
        ++i->second.wakes;
        signal_run(i->second.actor, i->second.exec, run_signal::wake, -1);
      } else {
        control->post([this, id = n.id] { revive(id); });
      }
      break;
    case kind::run_cancelled:
      control->post([this, id = n.id] { cancelled(id); });
      break;
    case kind::saga_cancelling:
      control->post([this, id = n.id] { cancel_signalled(id); });
      break;
    case kind::queue_has_items:
      if (queues)
        queues->notice(n.id);
      break;
    case kind::executor_gone:
      take_over_locked(std::nullopt);
      break;
    case kind::run_created:
      take_over_locked(n.id); // whoever can run it adopts it
      break;
    case kind::object_has_calls:
      if (object_types.count(n.id) == 0)
        return;
      control->post([this, type = n.id, key = n.key] {
        objects->reach(type, key, false);
      });
      break;
  }
}

void runtime_impl::recover() {
  // Runs of this id it cannot run (restarted without their workflow, or
  // at another version) go to processes that can.
  auto released = with_control([&](persistence::store& db) {
    auto n = db.release_unclaimable(cfg.executor_id, filter_);
    if (n > 0)
      db.notify(persistence::notice::gone(cfg.executor_id));
    return n;
  });
  if (released > 0)
    log().info("perdure: executor '{}' gives up {} PENDING runs it cannot "
               "run (their workflow is not registered here, or another app "
               "version started them)",
               cfg.executor_id, released);
  auto runs = with_control([&](persistence::store& db) {
    return db.claim_pending_runs(cfg.executor_id, filter_, clock->now_ms());
  });
  if (!runs.empty())
    log().info("perdure: recovering {} pending runs of executor '{}'",
                 runs.size(), cfg.executor_id);
  bring_in(std::move(runs));
  take_over_now(std::nullopt); // what died with other processes meanwhile
}

void runtime_impl::count_queue_restarts(
  const std::vector<persistence::run_record>& runs) {
  std::vector<std::string> queues;
  for (auto& run : runs)
    if (!run.queue_name.empty())
      queues.push_back(run.queue_name);
  if (queues.empty())
    return;
  try {
    stores->with(
      [&](persistence::store& db) { db.record_queue_starts(queues); });
  } catch (const std::exception& ex) {
    log().warn("perdure: could not count {} restarted queue items against "
               "their rate limits ({}); a few more may start in this window",
               queues.size(), ex.what());
  }
}

void runtime_impl::bring_in(std::vector<persistence::run_record> runs) {
  auto now = clock->now_ms();
  // Passivated runs stay out of memory: their timer brings them back (a
  // delivery marks the wake-up time 0, so those are loaded now). Deadlines
  // of runs in memory are armed by spawn_run.
  std::erase_if(runs, [&](const persistence::run_record& run) {
    if (!run.wake_at_ms || *run.wake_at_ms <= now)
      return false;
    if (run.deadline_ms) {
      std::lock_guard guard{active_mtx_};
      arm_deadline(run.id, *run.deadline_ms);
    }
    if (*run.wake_at_ms < passivated_forever)
      timers->schedule({*run.wake_at_ms, run.id, -1});
    return true;
  });
  count_queue_restarts(runs);
  constexpr std::size_t chunk = 512;
  for (std::size_t first = 0; first < runs.size(); first += chunk) {
    auto last = std::min(runs.size(), first + chunk);
    std::vector<std::string> ids;
    for (auto i = first; i < last; ++i)
      ids.push_back(runs[i].id);
    std::vector<persistence::journal_entry> entries;
    try {
      entries = stores->with(
        [&](persistence::store& db) { return db.load_journals(ids); });
    } catch (...) {
      // Claimed, so PENDING here, and nobody else looks at them: they are
      // this process's orphans, revived (claim and load again) soon.
      for (auto i = first; i < runs.size(); ++i)
        orphaned(runs[i].id);
      throw;
    }
    std::unordered_map<std::string, std::vector<persistence::journal_entry>>
      journals;
    for (auto& e : entries)
      journals[e.run_id].push_back(std::move(e));
    for (auto i = first; i < last; ++i) {
      auto journal = std::move(journals[runs[i].id]);
      spawn_run(std::move(runs[i]), std::move(journal));
    }
  }
}

void runtime_impl::take_over(std::optional<std::string> only) {
  std::lock_guard guard{active_mtx_};
  take_over_locked(std::move(only));
}

void runtime_impl::take_over_locked(std::optional<std::string> only) {
  if (!running_ || client_mode || lease_lost_)
    return;
  if (only) {
    control->post([this, id = std::move(*only)] { take_over_now(id); });
    return;
  }
  if (taking_over_) { // runs once more when the one under way ends
    take_over_again_ = true;
    return;
  }
  taking_over_ = true;
  control->post([this] {
    for (;;) {
      take_over_now(std::nullopt);
      try {
        objects->recover(); // keys of the gone, and keys nobody claimed
      } catch (const std::exception& ex) {
        log().warn("perdure: claiming objects failed ({}); trying again "
                   "later",
                   ex.what());
      }
      std::lock_guard guard{active_mtx_};
      if (!std::exchange(take_over_again_, false) || !running_) {
        taking_over_ = false;
        return;
      }
    }
  });
}

void runtime_impl::take_over_now(std::optional<std::string> only) {
  try {
    // Each pass takes this process's share of what is left; passes go on
    // while there is some, so live processes spread the runs between them.
    for (int pass = 0; pass < 64; ++pass) {
      {
        std::lock_guard guard{active_mtx_};
        if (!running_ || lease_lost_)
          return;
      }
      auto runs = stores->with([&](persistence::store& db) {
        return db.take_over(cfg.executor_id, filter_,
                            only ? std::optional<std::string_view>{*only}
                                 : std::nullopt,
                            clock->now_ms());
      });
      if (runs.empty())
        break;
      if (!only)
        log().info("perdure: executor '{}' took over {} runs of stopped or "
                     "lapsed executors",
                     cfg.executor_id, runs.size());
      bring_in(std::move(runs));
      if (only)
        return;
    }
    count_left();
  } catch (const std::exception& ex) {
    log().warn("perdure: taking over runs failed ({}); trying again later",
                 ex.what());
  }
}

void runtime_impl::count_left() {
  auto left = stores->with([&](persistence::store& db) {
    return db.count_unclaimable(cfg.executor_id, filter_);
  });
  if (left_pending_.exchange(left) != left && left > 0)
    log().info("perdure: executor '{}' leaves {} PENDING runs to processes "
                 "that can run them (their workflow is not registered here, "
                 "or they were started by another app version)",
                 cfg.executor_id, left);
}

void runtime_impl::lose_lease() {
  {
    std::lock_guard guard{active_mtx_};
    lease_lost_ = true;
    for (auto& [id, a] : active_)
      if (a.exec == 0) // object actors go below, with their queues
        signal_run(a.actor, a.exec, run_signal::drop, -1);
    active_.clear();
    orphans_.clear();
  }
  // After active_mtx_: the directory takes its own lock, then that one.
  for (auto& actor : objects->drop_all())
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  if (queues)
    queues->lease_lost();
}

void runtime_impl::claimed_again(const std::string& id) {
  std::lock_guard guard{active_mtx_};
  fenced_.erase(id);
}

void runtime_impl::regain_lease() {
  std::lock_guard guard{active_mtx_};
  lease_lost_ = false;
  fenced_.clear(); // a new epoch: whatever is still ours may run again
  if (!running_)
    return;
  control->post([this] {
    try {
      recover();
      objects->revive_dropped();
      objects->recover();
    } catch (const std::exception& ex) {
      log().warn("perdure: recovery after regaining the lease failed: {}",
                 ex.what());
    }
  });
}

bool runtime_impl::may_run_step(const std::string& id, std::int64_t epoch,
                                std::int32_t seq) {
  auto step = std::make_pair(id, seq);
  auto waiting_since = std::chrono::steady_clock::now();
  bool warned = false;
  // Not renewed for most of the lease (the store away, or this process
  // stalled): others may declare it lapsed any moment, so wait.
  for (;;) {
    if (!lease_->fresh(std::chrono::milliseconds{100})) {
      std::lock_guard guard{active_mtx_};
      if (!running_ || lease_lost_)
        return false;
      continue;
    }
    std::unique_lock guard{active_mtx_};
    if (!owns_locked(id, epoch))
      return false;
    if (in_body_.insert(step).second)
      return true;
    // An older copy of this run is in this step's body: wait for it.
    body_done_.wait_for(guard, std::chrono::milliseconds{100});
    if (!warned && std::chrono::steady_clock::now() - waiting_since
                     > std::chrono::seconds{30}) {
      warned = true;
      log().warn("perdure: run {} step {} waits for its body an older copy "
                 "began here to return (30 s so far): the body may hang",
                 id, seq);
    }
  }
}

void runtime_impl::step_body_done(const std::string& id, std::int32_t seq) {
  {
    std::lock_guard guard{active_mtx_};
    in_body_.erase(std::make_pair(id, seq));
  }
  body_done_.notify_all();
}

void runtime_impl::stop() {
  if (step_executor::runs_on(this))
    throw perdure::error(errc::invalid_argument,
                         "runtime::stop() was called from step code (or "
                         "another thread of the runtime), which stop() must "
                         "wait for: stop the runtime from an application "
                         "thread, e.g. one the step signals");
  {
    std::lock_guard guard{active_mtx_};
    if (!running_)
      return;
    running_ = false;
  }
  gate_.close_and_wait();
  {
    // Joined outside the lock: a callback may call when_done (which
    // throws not_running now) or wait for a run whose end takes it.
    std::unique_ptr<end_callbacks> callbacks;
    {
      std::lock_guard guard{callbacks_mtx_};
      callbacks = std::move(callbacks_);
    }
    if (callbacks && callbacks->on_own_thread()) // stop() in a callback
      end_callbacks::stop_from_own_thread(std::move(callbacks));
    callbacks.reset(); // before the stores it reads
  }
  if (client_mode) {
    stores.reset();
    std::lock_guard guard{control_mtx_};
    control_.reset();
    return;
  }
  shut_down();
}

void runtime_impl::shut_down() {
  if (queues)
    queues->stop(); // claims nothing more
  std::vector<caf::actor> actors;
  {
    std::lock_guard guard{active_mtx_};
    for (auto& [id, a] : active_)
      actors.push_back(a.actor);
    active_.clear();
  }
  if (objects)
    for (auto& a : objects->actors())
      actors.push_back(a);
  for (auto& a : actors)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  actors.clear();
  // Order matters: no notice may arrive, no actor may use the timers, the
  // executor or the writer afterwards (timers firing meanwhile find the
  // runtime stopped and do nothing).
  listener.reset();
  housekeeper_.reset();
  if (system)
    system->await_all_actors_done();
  // A takeover or revival under way on the control thread still arms
  // timers and reads the stores: it ends before they go (it spawns no actor,
  // running_ is false). Posts after this do nothing.
  if (control)
    control->stop();
  timers.reset();
  steps.reset();
  if (queues)
    queues->join();
  control.reset();
  writer.reset();
  (void)objects->drop_all(); // its actor handles go before the system
  // Every write is in: others may take the rest over. The heartbeat ran
  // until now (actors finishing may take longer than a lease).
  if (lease_)
    lease_->release();
  lease_.reset();
  system.reset();
  system_cfg.reset();
  stores.reset();
  tx_stores.reset();
  std::lock_guard guard{control_mtx_};
  control_.reset();
}

void runtime_impl::announce(const persistence::notice& n) {
  if (is_active(n.id))
    return;
  try {
    stores->with([&](persistence::store& db) { db.notify(n); });
  } catch (const std::exception& ex) {
    // Stored anyway: the owner's sweep finds it.
    log().warn("perdure: could not announce a delivery to run {}: {}", n.id,
                 ex.what());
  }
}

void runtime_impl::sweep() {
  try {
    auto ids = stores->with([&](persistence::store& db) {
      return db.awake_runs(cfg.executor_id);
    });
    for (auto& id : ids)
      if (!is_active(id))
        revive(id);
    // Sagas asked to cancel whose signal may have been lost (a notice
    // whose sender died, a passivation racing the request): again.
    auto sagas = stores->with([&](persistence::store& db) {
      return db.signalled_sagas(cfg.executor_id);
    });
    for (auto& id : sagas)
      cancel_signalled(id);
  } catch (const std::exception& ex) {
    log().warn("perdure: sweep failed: {}", ex.what());
  }
}

void runtime_impl::deadline_passed(const std::string& id, std::int64_t due_ms) {
  try {
    auto runs = stores->with([&](persistence::store& db) {
      return db.cancel_run(id, clock->now_ms(), due_ms);
    });
    if (!runs.empty())
      log().info("perdure: run {} passed its deadline: cancelled", id);
    apply_cancel(runs);
    if (!runs.empty())
      tell_parent(id);
  } catch (const std::exception& ex) {
    log().warn("perdure: could not cancel run {} at its deadline ({}); "
                 "trying again",
                 id, ex.what());
    std::lock_guard guard{active_mtx_};
    if (deadline_retries_.empty())
      deadline_retry_due_ = std::chrono::steady_clock::now()
                            + std::chrono::seconds{1};
    deadline_retries_[id] = due_ms;
  }
}

void runtime_impl::tell_parent(const std::string& id) {
  auto run = stores->with(
    [&](persistence::store& db) { return db.get_run(id); });
  if (run && run->parent_id) {
    wake(*run->parent_id, -1);
    announce(persistence::notice::woken(*run->parent_id));
  }
}

void runtime_impl::cancelled(const std::string& id) {
  {
    std::lock_guard guard{active_mtx_};
    auto i = active_.find(id);
    if (i != active_.end()) {
      // The actor stops and reports the end itself.
      if (i->second.exec == queued_exec)
        cancel_queued(i->second.actor, id); // an invocation not started
      else
        signal_run(i->second.actor, i->second.exec, run_signal::cancel, 0);
      return;
    }
  }
  // Passivated (or owned elsewhere): nothing to stop; tell the waiters.
  run_stopped(id, run_outcome{run_status::cancelled, std::nullopt,
                              std::string{"cancelled"}});
}

void runtime_impl::cancel_signalled(const std::string& id) {
  {
    std::lock_guard guard{active_mtx_};
    if (signal_cancel_locked(id))
      return;
    if (reviving_.count(id) > 0) {
      // Coming back now, maybe from a row read before the request:
      // signalled once it is in memory (see revive).
      cancels_pending_.insert(id);
      return;
    }
  }
  revive(id); // it reads the request from its row
}

bool runtime_impl::signal_cancel_locked(const std::string& id) {
  auto i = active_.find(id);
  if (i == active_.end())
    return false;
  ++i->second.wakes; // a passivation under way stays for it
  signal_run(i->second.actor, i->second.exec, run_signal::cancel, 1);
  return true;
}

void runtime_impl::apply_cancel(
  const std::vector<persistence::cancelled_run>& runs) {
  for (auto& c : runs) {
    announce(c.signalled ? persistence::notice::saga_cancel(c.id)
                         : persistence::notice::cancelled(c.id));
    if (c.signalled)
      cancel_signalled(c.id);
    else
      cancelled(c.id);
  }
}

std::optional<caf::actor> runtime_impl::spawn_object(object_activation a) {
  std::lock_guard guard{active_mtx_};
  if (!running_ || lease_lost_)
    return std::nullopt;
  auto actor = spawn_object_actor(*system, *this, std::move(a));
  forget_caf_logger();
  return actor;
}

void runtime_impl::invocation_started(const std::string& id, caf::actor actor,
                                      std::uint32_t exec, std::int64_t epoch) {
  std::lock_guard guard{active_mtx_};
  if (!running_)
    return;
  // A claim of the key at a newer epoch than a fencing of this invocation
  // here (a lease regained, the key claimed again): that copy is ours.
  if (auto f = fenced_.find(id); f != fenced_.end() && f->second < epoch)
    fenced_.erase(f);
  active_[id] = active_run{std::move(actor), 0, epoch, exec};
}

bool runtime_impl::is_active(const std::string& id) const {
  std::lock_guard guard{active_mtx_};
  return active_.count(id) > 0;
}

void runtime_impl::wake(const std::string& id, std::int32_t seq) {
  std::lock_guard guard{active_mtx_};
  if (!running_ || client_mode)
    return; // a client has no runs in memory: announce() tells the owner
  auto i = active_.find(id);
  if (i != active_.end()) {
    ++i->second.wakes;
    signal_run(i->second.actor, i->second.exec, run_signal::wake, seq);
    return;
  }
  // Under the lock: stop() clears running_ under it before it lets the
  // executor go, so the executor outlives this post.
  control->post([this, id] { revive(id); });
}

std::uint64_t runtime_impl::wake_count(const std::string& id) const {
  std::lock_guard guard{active_mtx_};
  auto i = active_.find(id);
  return i == active_.end() ? 0 : i->second.wakes;
}

bool runtime_impl::finish_passivation(const std::string& id,
                                      std::int64_t epoch, std::uint64_t seen) {
  {
    std::lock_guard guard{active_mtx_};
    auto i = active_.find(id);
    if (i == active_.end() || i->second.epoch != epoch
        || i->second.wakes != seen)
      return false;
    active_.erase(i);
  }
  tell_watchers(id, std::nullopt); // its waiters poll the store now
  return true;
}

void runtime_impl::revive(const std::string& id, revival why) {
  bool count_attempt = why == revival::crashed;
  {
    std::lock_guard guard{active_mtx_};
    // An orphan of ours is revived by housekeeping at a new epoch: a wake
    // keeping its epoch could run alongside a body its last copy began.
    if (!running_ || lease_lost_ || active_.count(id) > 0
        || fenced_.count(id) > 0
        || (why == revival::wake && orphans_.count(id) > 0)
        || !reviving_.insert(id).second)
      return;
  }
  struct done_reviving {
    runtime_impl& rt;
    const std::string& id;
    ~done_reviving() {
      std::lock_guard guard{rt.active_mtx_};
      rt.reviving_.erase(id);
      if (rt.cancels_pending_.erase(id) > 0)
        rt.signal_cancel_locked(id);
    }
  } guard{*this, id};
  try {
    auto run = stores->with([&](persistence::store& db) {
      return db.claim_run(id, cfg.executor_id, filter_, count_attempt,
                          why != revival::wake);
    });
    if (!run)
      return; // ended, or not ours
    if (count_attempt) // a restart after a crash
      count_queue_restarts({*run});
    auto journal = stores->with(
      [&](persistence::store& db) { return db.load_journals({id}); });
    spawn_run(std::move(*run), std::move(journal));
  } catch (const std::exception& ex) {
    log().warn("perdure: could not bring run {} back ({}); trying again "
                 "soon",
                 id, ex.what());
    orphaned(id);
  }
}

std::optional<caf::actor>
runtime_impl::spawn_run(persistence::run_record run,
                        std::vector<persistence::journal_entry> journal) {
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
    writer->complete(std::move(c), [this, id = run.id, outcome,
                                    parent = run.parent_id](
                                     persistence::write_result r) {
      if (r.ack == persistence::write_ack::failed) {
        orphaned(id); // tried again by housekeeping
        return;
      }
      if (r.ack != persistence::write_ack::committed)
        return;
      run_stopped(id, outcome);
      if (parent) // it may be waiting for this end
        wake(*parent, -1);
    });
    return std::nullopt;
  }
  if (workflows.count(run.name) == 0) {
    // Claims filter these out; a run that slips through stays PENDING
    // for a process that knows its workflow (never ERROR for lacking it).
    log().warn("perdure: run {} is of workflow '{}', not registered here; "
                 "left PENDING",
                 run.id, run.name);
    return std::nullopt;
  }
  std::lock_guard guard{active_mtx_};
  if (!running_ || lease_lost_)
    return std::nullopt;
  if (auto f = fenced_.find(run.id); f != fenced_.end()) {
    if (run.owner.epoch <= f->second)
      return std::nullopt;
    fenced_.erase(f);
  }
  auto i = active_.find(run.id);
  if (i != active_.end()) {
    // Two spawns of one run race (a start or a recovery, and a revival's
    // newer claim): the copy at the newer epoch runs, the other one goes.
    if (i->second.epoch >= run.owner.epoch)
      return std::nullopt;
    signal_run(i->second.actor, i->second.exec, run_signal::drop, -1);
    active_.erase(i);
  }
  if (run.deadline_ms)
    arm_deadline(run.id, *run.deadline_ms);
  auto id = run.id;
  auto epoch = run.owner.epoch;
  auto queue = run.queue_name;
  log().debug("perdure: run {} starts here at epoch {} with {} journal "
              "entries",
              id, epoch, journal.size());
  auto actor = spawn_run_actor(*system, *this, std::move(run),
                               std::move(journal));
  if (!queue.empty() && queues)
    queues->holding(queue, id, actor);
  active_.emplace(std::move(id), active_run{actor, 0, epoch});
  forget_caf_logger();
  return actor;
}

void runtime_impl::arm_deadline(const std::string& id, std::int64_t due_ms) {
  auto [i, fresh] = armed_deadlines_.try_emplace(id, due_ms);
  if (!fresh && i->second == due_ms)
    return;
  i->second = due_ms; // a new attempt's deadline: the old timer is stale
  timers->schedule({due_ms, id, deadline_seq});
}

void runtime_impl::check_lease() const {
  std::lock_guard guard{active_mtx_};
  if (lease_lost_)
    throw perdure::error(errc::fenced,
                         "executor '" + cfg.executor_id
                           + "' lost its lease (this process stalled or was "
                             "cut off past lease_timeout) and has not got it "
                             "back");
}

void runtime_impl::orphaned(const std::string& id, bool crashed) {
  std::lock_guard guard{active_mtx_};
  // With the lease lost, the recovery that regains it claims every run
  // still ours: an orphan revived besides would claim it a second time,
  // and two actors of one run would each run the step under way (found by
  // the torture run: a queue item's body twice at once after a regain).
  if (!running_ || lease_lost_ || fenced_.count(id) > 0)
    return;
  if (orphans_.empty() && !orphans_busy_)
    orphans_due_ = std::chrono::steady_clock::now()
                   + std::max(orphan_backoff_, cfg.orphan_retry);
  orphans_[id] |= crashed;
}

void runtime_impl::report_fenced(const std::string& id) {
  std::lock_guard guard{log_mtx_};
  auto now = std::chrono::steady_clock::now();
  if (now < fenced_window_end_) {
    ++fenced_unreported_;
    return;
  }
  fenced_window_end_ = now + std::chrono::seconds{5};
  log().warn("perdure: run {} is owned elsewhere now (fenced); this process "
             "stops running it",
             id);
}

void runtime_impl::flush_log_summaries() {
  std::lock_guard guard{log_mtx_};
  if (fenced_unreported_ == 0
      || std::chrono::steady_clock::now() < fenced_window_end_)
    return;
  log().warn("perdure: {} more runs were fenced (owned elsewhere now) and "
             "stopped here in the last 5 s",
             std::exchange(fenced_unreported_, 0));
}

void runtime_impl::housekeeping() {
  flush_log_summaries();
  // Before active_mtx_: the directory takes its own lock, then that one.
  auto objects_due = objects->revival_due();
  std::lock_guard guard{active_mtx_};
  if (!running_)
    return;
  auto now = std::chrono::steady_clock::now();
  if (!deadline_retries_.empty() && now >= deadline_retry_due_) {
    for (auto& retry : deadline_retries_)
      control->post([this, id = retry.first, due = retry.second] {
        deadline_passed(id, due);
      });
    deadline_retries_.clear();
  }
  if (objects_due)
    control->post([this] { objects->revive_due(); });
  if (!stranded_busy_ && !lease_lost_ && now >= stranded_due_) {
    stranded_busy_ = true;
    control->post([this] { check_stranded(); });
  }
  if (orphans_.empty() || orphans_busy_ || now < orphans_due_)
    return;
  orphans_busy_ = true;
  control->post([this] { revive_orphans(); });
}

void runtime_impl::check_stranded() {
  struct next_check {
    runtime_impl& rt;
    ~next_check() {
      std::lock_guard guard{rt.active_mtx_};
      rt.stranded_busy_ = false;
      rt.stranded_due_ = std::chrono::steady_clock::now() + rt.cfg.stranded_check;
    }
  } next{*this};
  try {
    // What this process holds or is about to: actors, revivals, orphans
    // due for one, items claimed ahead of their workers.
    auto claimed_ahead = [&] {
      std::unordered_set<std::string> ids;
      if (queues)
        queues->claimed_ahead(ids);
      return ids;
    };
    auto now = clock->now_ms();
    auto stored = stores->with([&](persistence::store& db) {
      return db.count_awake_pending(cfg.executor_id, now);
    });
    {
      auto held = claimed_ahead().size();
      std::lock_guard guard{active_mtx_};
      held += active_.size() + reviving_.size() + orphans_.size();
      if (stored <= static_cast<std::int64_t>(held)) {
        stranded_suspects_.clear();
        return;
      }
    }
    auto listed = stores->with([&](persistence::store& db) {
      return db.list_awake_pending(cfg.executor_id, now);
    });
    auto ahead = claimed_ahead(); // as of now, after the list
    std::vector<persistence::awake_pending> missing;
    {
      std::lock_guard guard{active_mtx_};
      if (!running_ || lease_lost_)
        return;
      std::unordered_map<std::string, std::int64_t> suspects;
      for (auto& p : listed) {
        if (active_.count(p.id) > 0 || reviving_.count(p.id) > 0
            || orphans_.count(p.id) > 0 || ahead.count(p.id) > 0)
          continue;
        if (auto f = fenced_.find(p.id); f != fenced_.end() && p.epoch <= f->second)
          continue; // lost to another process, which claims it anew
        auto s = stranded_suspects_.find(p.id);
        if (s != stranded_suspects_.end() && s->second == p.epoch)
          missing.push_back(std::move(p));
        else
          suspects.emplace(p.id, p.epoch);
      }
      stranded_suspects_ = std::move(suspects);
    }
    if (missing.empty())
      return;
    log().warn("perdure: executor '{}' holds {} PENDING runs or calls with no "
               "actor (a claim whose commit reply was lost, or a load that "
               "failed after its claim); bringing them back",
               cfg.executor_id, missing.size());
    for (auto& p : missing) {
      if (p.object_type.empty())
        revive(p.id, revival::lost);
      else if (object_types.count(p.object_type) > 0)
        objects->reclaim(p.object_type, p.object_key);
    }
  } catch (const std::exception& ex) {
    log().warn("perdure: looking for stranded work failed ({}); trying again "
               "later",
               ex.what());
  }
}

void runtime_impl::revive_orphans() {
  std::unordered_map<std::string, bool> ids;
  {
    std::lock_guard guard{active_mtx_};
    ids.swap(orphans_);
  }
  log().info("perdure: reviving {} runs left without an actor", ids.size());
  // A crashed actor counts as a recovery (a run that crashes its actor
  // every time must end); a store outage does not (a long-lived run may
  // see many). A failure makes the run an orphan again.
  for (auto& [id, crashed] : ids)
    revive(id, crashed ? revival::crashed : revival::lost);
  std::lock_guard guard{active_mtx_};
  orphans_busy_ = false;
  // The store still failing: try less often, up to 8 x orphan_retry.
  orphan_backoff_ = orphans_.empty()
                      ? std::chrono::milliseconds{0}
                      : std::min(std::max(orphan_backoff_ * 2, cfg.orphan_retry),
                                 cfg.orphan_retry * 8);
  orphans_due_ = std::chrono::steady_clock::now()
                 + std::max(orphan_backoff_, cfg.orphan_retry);
}

void runtime_impl::fenced_from(const std::string& id, std::int64_t epoch) {
  {
    std::lock_guard guard{active_mtx_};
    auto i = active_.find(id);
    if (reviving_.count(id) > 0
        || (i != active_.end() && i->second.epoch > epoch))
      return; // our own newer claim fenced an older copy here
    auto& at = fenced_[id];
    at = std::max(at, epoch);
    orphans_.erase(id);
  }
  queue_item_released(id); // outside the lock: its worker starts the next
}

bool runtime_impl::owns(const std::string& id, std::int64_t epoch) const {
  std::lock_guard guard{active_mtx_};
  return owns_locked(id, epoch);
}

bool runtime_impl::owns_locked(const std::string& id,
                               std::int64_t epoch) const {
  // A lost lease: others may be running every run of ours.
  auto i = active_.find(id);
  return !lease_lost_ && i != active_.end() && i->second.epoch == epoch
         && fenced_.count(id) == 0;
}

void runtime_impl::run_stopped(const std::string& id,
                               std::optional<run_outcome> outcome,
                               std::int64_t epoch) {
  {
    // Only the copy that stops leaves: an older copy replaced by a newer
    // claim must not take the newer one's place with it.
    std::lock_guard guard{active_mtx_};
    auto i = active_.find(id);
    if (i != active_.end() && (epoch < 0 || i->second.epoch == epoch))
      active_.erase(i);
  }
  if (outcome)
    queue_item_released(id);
  tell_watchers(id, std::move(outcome));
}

void runtime_impl::on_end(const std::string& id, std::function<void()> done) {
  std::lock_guard guard{callbacks_mtx_};
  if (!running())
    throw perdure::error(errc::not_running, "the runtime is not running");
  if (!callbacks_)
    callbacks_ = std::make_unique<end_callbacks>(*this);
  callbacks_->add(id, std::move(done));
}

void runtime_impl::tell_watchers(const std::string& id,
                                 std::optional<run_outcome> outcome) {
  if (outcome) {
    std::lock_guard guard{callbacks_mtx_};
    if (callbacks_)
      callbacks_->ended(id);
  }
  std::lock_guard guard{done_mtx_};
  auto i = watchers_.find(id);
  if (i == watchers_.end())
    return;
  ++i->second.stops;
  if (outcome)
    i->second.outcome = std::move(outcome);
  i->second.ended.notify_all(); // under the lock: unwatch may erase it
}

void runtime_impl::watch(const std::string& id) {
  std::lock_guard guard{done_mtx_};
  ++watchers_[id].count;
}

void runtime_impl::unwatch(const std::string& id) {
  std::lock_guard guard{done_mtx_};
  auto i = watchers_.find(id);
  if (i != watchers_.end() && --i->second.count == 0)
    watchers_.erase(i);
}

std::uint64_t runtime_impl::stops(const std::string& id) {
  std::lock_guard guard{done_mtx_};
  return watchers_[id].stops;
}

std::optional<run_outcome>
runtime_impl::wait_ended(const std::string& id,
                         std::chrono::milliseconds timeout,
                         std::uint64_t stops) {
  std::unique_lock guard{done_mtx_};
  auto& w = watchers_[id];
  w.ended.wait_for(guard, timeout, [&] {
    return w.outcome.has_value() || w.stops != stops;
  });
  return w.outcome;
}

// -- handle support -------------------------------------------------------------

} // namespace detail

// -- runtime --------------------------------------------------------------------

runtime::runtime(config cfg) : client(runtime_mode{}, std::move(cfg)) {
  add_internal_workflows();
}

runtime::~runtime() {
  try {
    stop();
  } catch (const std::exception& ex) {
    impl_->log().error("perdure: {}", ex.what());
  }
}

void runtime::add_workflow(std::string name, detail::workflow_entry entry) {
  detail::check_name("workflow name", name);
  if (impl_->running())
    throw error(errc::invalid_argument,
                "register workflow '" + name + "' before start()");
  if (!impl_->workflows.emplace(name, std::move(entry)).second)
    throw error(errc::invalid_argument,
                "workflow '" + name + "' is already registered");
}

void runtime::start() {
  impl_->start();
}

void runtime::stop() {
  impl_->stop();
}

std::int64_t runtime::left_pending() const {
  return impl_->left_pending();
}

} // namespace perdure
