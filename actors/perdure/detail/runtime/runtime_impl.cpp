#include "perdure/detail/runtime/runtime_impl.hpp"

#include <caf/atom.hpp>
#include <caf/logger.hpp>
#include <caf/send.hpp>

#include <spdlog/spdlog.h>

#include "perdure/detail/execution/run_message.hpp"
#include "perdure/detail/runs/end_callbacks.hpp"
#include "perdure/detail/runtime/actor_threads.hpp"
#include "perdure/detail/runtime/ids.hpp"
#include "perdure/detail/timer/clock.hpp"

namespace perdure::detail {

namespace {

/// Returns how often a runtime renews its lease: a quarter of its timeout,
/// at most every 250 ms (a dead holder is declared lapsed after missing a
/// second of them, so this bounds how soon its runs are taken over).
std::chrono::milliseconds heartbeat_interval(const config& cfg) {
  return std::clamp(cfg.lease_timeout / 4, std::chrono::milliseconds{10},
                    std::chrono::milliseconds{250});
}

/// CAF 0.17 parks a reference to its logger in a thread-local of every
/// thread that builds the system or spawns an actor, and ~actor_system waits
/// until the logger dies: application threads drop theirs at once, so the
/// runtime can stop from any thread.
void forget_caf_logger() {
  caf::logger::set_current_actor_system(nullptr);
}

} // namespace

runtime_impl::runtime_impl(config c, bool client)
  : cfg(std::move(c)),
    client_mode(client),
    clock_(cfg.clock ? cfg.clock : perdure::system_clock()),
    logger_(cfg.logger ? cfg.logger : spdlog::default_logger()),
    instance_(random_id()),
    runs_(cfg.orphan_retry),
    svc{.cfg = cfg,
        .workflows = workflows,
        .object_types = object_types,
        .run_filter = run_filter_,
        .object_filter = object_filter_,
        .client_mode = client,
        .logger = *logger_,
        .metrics = metrics_,
        .clock = clock_.get(),
        .runs = &runs_,
        .ends = &ends_,
        .objects = &objects_,
        .gate = &gate_,
        .admin = &admin_,
        .lease = &lease_,
        .launcher = &launcher_,
        .recovery = &recovery_,
        .notices = &notices_} {
  if (cfg.executor_id.empty())
    cfg.executor_id = process_executor_id();
}

runtime_impl::~runtime_impl() {
  stop();
}

void runtime_impl::set_queue_hooks(std::shared_ptr<queue_hooks> q) {
  queues_ = std::move(q);
  svc.queues = queues_.get();
}

void runtime_impl::phase(const char* name) {
  log().debug("perdure: {} (executor '{}')", name, cfg.executor_id);
}

persistence::store_options runtime_impl::store_options() const {
  // A runtime stalled inside a transaction for longer than its lease has
  // lost the lease anyway: the server ends the session (after twice the
  // lease), so its runs' row locks do not keep the takeover away.
  return {.url = cfg.database_url,
          .schema = cfg.schema,
          .retry_budget = cfg.db_retry_budget,
          .lease_epoch = lease_.epoch(),
          .idle_transaction_timeout = client_mode
                                        ? std::chrono::milliseconds{0}
                                        : 2 * cfg.lease_timeout,
          .metrics = cfg.metrics ? &metrics_.store() : nullptr,
          .logger = logger_};
}

void runtime_impl::build_filters() {
  run_filter_.names.clear();
  for (auto& [name, entry] : workflows) {
    run_filter_.names.push_back(name);
    for (auto& patch : entry.patches) // see claim_filter
      run_filter_.names.push_back(name + '\x1e' + patch);
  }
  run_filter_.app_version = cfg.app_version;
  object_filter_.types.clear();
  for (auto& [type, entry] : object_types) {
    auto& [name, handlers] = object_filter_.types.emplace_back();
    name = type;
    for (auto& [handler, h] : entry.handlers)
      handlers.push_back(handler);
  }
  object_filter_.app_version = cfg.app_version;
}

void runtime_impl::start_client() {
  auto opts = store_options();
  admin_.open(opts, cfg.migrate_schema);
  stores_ = std::make_unique<store_pool>(opts, cfg.pooled_connections);
  svc.stores = stores_.get();
  runs_.open();
  gate_.open();
}

// Start, in phases:
//   1 schema     the admin connection, migrated
//   2 lease      acquired, heartbeats from now on
//   3 parts      writer, executors, pools, actor system, timers
//   4 open       the registry (runs may live) and the gate (calls enter)
//   5 recover    own runs, then what died elsewhere; then keys; nothing
//                else claims meanwhile (a notice's revive or takeover
//                beside it claimed a run twice, and two copies ran a step)
//   6 listen     notices; the first says `missed`: every run in memory
//                looks at the store again, the sweep and a takeover run
//   7 queues     after recovery: what they claim is not ours yet
//   8 housekeep  the 100 ms ticker
void runtime_impl::start() {
  if (running())
    return;
  if (client_mode) {
    start_client();
    return;
  }
  auto opts = store_options();
  phase("start: schema");
  admin_.open(opts, cfg.migrate_schema);
  build_filters();
  // A runtime object started again: nothing of its last life counts (its
  // timers and its takeover job went with it).
  runs_.reset();
  recovery_.reset();
  try {
    phase("start: lease");
    lease_.acquire(opts, instance_, heartbeat_interval(cfg));
  } catch (...) {
    admin_.close();
    throw;
  }
  try {
    start_holding_lease(opts);
  } catch (...) {
    runs_.close();
    gate_.close_and_wait(); // application threads may be in calls already
    ends_.stop_callbacks(); // when_done may have been asked for meanwhile
    shut_down(); // gives the lease up again
    throw;
  }
}

void runtime_impl::start_holding_lease(const persistence::store_options& opts) {
  phase("start: parts");
  std::vector<std::unique_ptr<persistence::store>> journal;
  auto writers = admin_.with([](persistence::store& db) {
    return std::string_view{db.dialect()} == "sqlite";
  }) ? std::size_t{1}
     : std::max<std::size_t>(1, cfg.journal_connections);
  for (std::size_t i = 0; i < writers; ++i)
    journal.push_back(persistence::open_store(opts));
  writer_ = std::make_unique<persistence::journal_writer>(
    std::move(journal),
    persistence::journal_writer::options{
      .metrics = cfg.metrics ? &metrics_.store() : nullptr,
      .logger = logger_});
  steps_ = std::make_unique<step_executor>(cfg.step_threads, &svc);
  control_ = std::make_unique<step_executor>(
    std::max<std::size_t>(1, cfg.control_threads), &svc);
  stores_ = std::make_unique<store_pool>(opts, cfg.pooled_connections);
  tx_stores_ = std::make_unique<store_pool>(opts, cfg.step_threads);
  system_cfg_ = std::make_unique<caf::actor_system_config>();
  system_cfg_->set("scheduler.max-threads", cfg.scheduler_threads);
  system_cfg_->set("scheduler.max-throughput", std::size_t{300});
  system_cfg_->set("scheduler.policy", caf::atom("sharing"));
  system_cfg_->add_thread_hook<actor_threads>(&svc);
  system_ = std::make_unique<caf::actor_system>(*system_cfg_);
  forget_caf_logger();
  timers_ = std::make_unique<timer_service>(clock_, [this](const timer& t) {
    // A timer armed "due at once" (a minimal due time) is no lateness, and
    // its difference with now would overflow.
    if (auto now = clock_->now_ms(); cfg.metrics && t.due_ms > 0)
      metrics_.timer_lateness.observe(
        now > t.due_ms ? static_cast<double>(now - t.due_ms) / 1000.0 : 0.0);
    if (t.seq != deadline_seq) {
      launcher_.wake(t.run_id, t.seq);
      return;
    }
    deadlines_->fired(t.run_id, t.due_ms);
    runs_.if_running([&] {
      control_->post([this, id = t.run_id, due = t.due_ms] {
        notices_.deadline_passed(id, due);
      });
    });
  });
  deadlines_ = std::make_unique<run_deadlines>(*timers_);
  svc.started_at_ms = clock_->now_ms();
  svc.writer = writer_.get();
  svc.steps = steps_.get();
  svc.control = control_.get();
  svc.stores = stores_.get();
  svc.tx_stores = tx_stores_.get();
  svc.system = system_.get();
  svc.timers = timers_.get();
  svc.deadlines = deadlines_.get();
  phase("start: open");
  runs_.open();
  gate_.open();
  phase("start: recover");
  recovery_.recover();
  objects_.recover(true);
  phase("start: listen");
  notices_.listen(opts);
  if (queues_) {
    phase("start: queues");
    queues_->start();
  }
  phase("start: housekeeping");
  housekeeper_ = std::make_unique<ticker>(std::chrono::milliseconds{100},
                                          [this] { housekeeping(); });
  phase("started");
}

// Stop, in phases:
//   1 close    the registry (nothing new lives), the gate (calls drain),
//              the when_done callbacks
//   2 quiesce  queues claim nothing more; every actor is told to exit; no
//              notice and no housekeeping after this; the actors finish
//   3 release  in the order the parts depend on each other (see below)
void runtime_impl::stop() {
  if (step_executor::runs_on(&svc)) // its executors and the queues' pools
    throw perdure::error(errc::invalid_argument,
                         "runtime::stop() was called from step code (or "
                         "another thread of the runtime), which stop() must "
                         "wait for: stop the runtime from an application "
                         "thread, e.g. one the step signals");
  if (actor_threads::runs_on(&svc)) // a workflow body, an object handler
    throw perdure::error(errc::invalid_argument,
                         "runtime::stop() was called from a workflow body or "
                         "an object handler, whose actor stop() must wait "
                         "for: stop the runtime from an application thread, "
                         "e.g. one the workflow signals");
  {
    std::unique_lock guard{stop_mtx_};
    if (stopping_on_) {
      // Nested in this stop (a callback it runs), or on the callbacks
      // thread it joins: waiting would never end; the stop goes on.
      if (*stopping_on_ == std::this_thread::get_id()
          || end_callbacks::runs_on(&svc))
        return;
      stop_done_.wait(guard, [this] { return !stopping_on_; });
      return;
    }
    if (!runs_.close())
      return;
    stopping_on_ = std::this_thread::get_id();
  }
  struct stop_done {
    runtime_impl& rt;
    ~stop_done() {
      {
        std::lock_guard guard{rt.stop_mtx_};
        rt.stopping_on_.reset();
      }
      rt.stop_done_.notify_all();
    }
  } done{*this};
  phase("stop: close");
  gate_.close_and_wait();
  ends_.stop_callbacks(); // before the stores it reads
  if (client_mode) {
    svc.stores = nullptr;
    stores_.reset();
    admin_.close();
    return;
  }
  shut_down();
}

void runtime_impl::shut_down() {
  phase("stop: quiesce");
  if (queues_)
    queues_->stop(); // claims nothing more
  auto actors = runs_.take_actors();
  for (auto& a : objects_.actors())
    actors.push_back(a);
  for (auto& a : actors)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  actors.clear();
  // No notice may arrive, no actor may use the timers, the executor or the
  // writer afterwards (timers firing meanwhile find the runtime stopped
  // and do nothing).
  notices_.stop_listening();
  housekeeper_.reset();
  if (system_)
    system_->await_all_actors_done();
  phase("stop: release");
  // A takeover or revival under way on the control thread still arms
  // timers and reads the stores: it ends before they go (it spawns no
  // actor: the registry is closed). Posts after this do nothing.
  if (control_)
    control_->stop();
  timers_.reset();
  deadlines_.reset();
  steps_.reset();
  if (queues_)
    queues_->join();
  // The writer's callbacks and the step jobs hold actor handles: they go
  // before the actor system. The writer before the control executor: the
  // callbacks of the writes it still commits post to it (a no-op now).
  writer_.reset();
  control_.reset();
  (void)objects_.drop_all(); // its actor handles go before the system
  // Every write is in: others may take the rest over. The heartbeat ran
  // until now (actors finishing may take longer than a lease).
  lease_.release();
  system_.reset();
  system_cfg_.reset();
  // The pools last: the lease and the system's last actors used them.
  stores_.reset();
  tx_stores_.reset();
  svc.writer = nullptr;
  svc.steps = nullptr;
  svc.control = nullptr;
  svc.stores = nullptr;
  svc.tx_stores = nullptr;
  svc.system = nullptr;
  svc.timers = nullptr;
  svc.deadlines = nullptr;
  admin_.close();
  phase("stopped");
}

void runtime_impl::housekeeping() {
  lease_.flush_log_summaries();
  // Before the registry's lock: the directory takes its own lock, then
  // that one.
  auto objects_due = objects_.revival_due();
  if (!runs_.running())
    return;
  auto now = std::chrono::steady_clock::now();
  auto post = [this](auto job) {
    runs_.if_running([&] { control_->post(std::move(job)); });
  };
  for (auto& [id, due] : deadlines_->take_due_retries(now))
    post([this, id = id, due = due] { notices_.deadline_passed(id, due); });
  if (objects_due)
    post([this] { objects_.revive_due(); });
  if (runs_.live() && recovery_.stranded_check_due(now))
    post([this] { recovery_.check_stranded(); });
  if (runs_.orphans_due(now))
    post([this] { launcher_.revive_orphans(); });
  if (cfg.metrics && now >= store_gauges_due_) {
    // Read every interval (what another process computed, or computed
    // here if it is due): one query of one row most of the time.
    store_gauges_due_ = now + cfg.store_gauges_interval;
    post([this] { refresh_store_gauges(); });
  }
}

void runtime_impl::refresh_store_gauges() {
  // A slow store: the next interval's read waits for this one's end.
  if (store_gauges_busy_.exchange(true))
    return;
  try {
    auto now = detail::now_ms();
    auto interval = cfg.store_gauges_interval.count();
    auto g = stores_->with([&](persistence::store& db) {
      return db.refresh_store_gauges(now, interval, cfg.executor_id);
    });
    metrics_.store_gauges(g, now);
  } catch (const std::exception& ex) {
    log().debug("perdure: the store-wide gauges could not be read ({}); "
                "tried again in {} ms",
                ex.what(), cfg.store_gauges_interval.count());
  }
  store_gauges_busy_ = false;
}

telemetry::snapshot runtime_impl::metrics() {
  sample_gauges();
  return metrics_.registry.read();
}

void runtime_impl::read_metrics(telemetry::series_visitor& v) {
  sample_gauges();
  metrics_.registry.visit(v);
}

void runtime_impl::sample_gauges() {
  // Gauges are read off the parts now; the gate keeps them from being torn
  // down meanwhile (a stopped runtime holds nothing).
  try {
    client_call call{*this};
    metrics_.runs_in_memory.set(static_cast<double>(runs_.active_count()));
    metrics_.keys_in_memory.set(static_cast<double>(objects_.size()));
    if (steps_) {
      auto load = steps_->load();
      metrics_.step_threads_busy.set(static_cast<double>(load.busy));
      metrics_.step_backlog.set(static_cast<double>(load.queued));
    }
    if (timers_)
      metrics_.timers_armed.set(static_cast<double>(timers_->size()));
    metrics_.lease_age.set(lease_.age_seconds());
    metrics_.runs_stranded.set(static_cast<double>(recovery_.stranded_runs()));
    auto at = metrics_.store_gauges_at_ms.load();
    metrics_.store_gauges_age.set(
      at == 0 ? -1.0 : static_cast<double>(detail::now_ms() - at) / 1000.0);
  } catch (const perdure::error&) {
    for (auto* g : {&metrics_.runs_in_memory, &metrics_.keys_in_memory,
                    &metrics_.step_threads_busy, &metrics_.step_backlog,
                    &metrics_.timers_armed})
      g->set(0);
    metrics_.lease_age.set(-1);
  }
}

} // namespace perdure::detail
