#include "perdure/runtime.hpp"

#include <caf/atom.hpp>
#include <caf/logger.hpp>
#include <caf/send.hpp>

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>
#include <future>
#include <random>
#include <thread>

#include "perdure/detail/awaiters.hpp"
#include "perdure/detail/clock.hpp"
#include "perdure/detail/run_actor.hpp"
#include "perdure/detail/runtime_impl.hpp"
#include "perdure/detail/time_math.hpp"
#include "perdure/persistence/text.hpp"

namespace perdure {

namespace {

/// Longest workflow name or id accepted.
constexpr std::size_t max_name_length = 255;

} // namespace


void detail::check_name(std::string_view what, std::string_view name) {
  if (!persistence::is_valid_name(name, max_name_length))
    throw error(errc::invalid_argument,
                std::string{what} + " must be 1 to "
                  + std::to_string(max_name_length)
                  + " bytes of UTF-8 without NUL (got "
                  + std::to_string(name.size()) + " bytes)");
}

void detail::check_key(std::string_view what, std::string_view name) {
  check_name(what, name);
  if (!persistence::is_valid_key(name, max_name_length))
    throw error(errc::invalid_argument,
                std::string{what}
                  + " must not contain the control characters 0x1E or 0x1F "
                    "(Perdure's separators of types, keys and idempotency "
                    "keys)");
}

namespace {

/// Returns now + `timeout` on the steady clock, saturated (a timeout of
/// `milliseconds::max()` means never).
std::chrono::steady_clock::time_point
saturating_deadline(std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  auto now = clock::now();
  auto room = std::chrono::duration_cast<std::chrono::milliseconds>(
    clock::time_point::max() - now);
  return timeout >= room ? clock::time_point::max() : now + timeout;
}

/// Returns how often a runtime renews its lease: a quarter of its timeout,
/// at most every 250 ms (a dead holder is declared lapsed after missing a
/// second of them, so this bounds how soon its runs are taken over).
std::chrono::milliseconds heartbeat_interval(const config& cfg) {
  return std::clamp(cfg.lease_timeout / 4, std::chrono::milliseconds{10},
                    std::chrono::milliseconds{250});
}

} // namespace

/// Returns a fresh run id: 12 hex digits of milliseconds since the epoch,
/// then 20 random ones. Time-ordered ids land next to each other in the
/// journal's primary key, which keeps index inserts cheap.
std::string detail::random_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char digits[] = "0123456789abcdef";
  std::string id(32, '0');
  auto time = static_cast<std::uint64_t>(detail::now_ms());
  auto a = rng(), b = rng();
  for (int i = 0; i < 12; ++i)
    id[i] = digits[(time >> ((11 - i) * 4)) & 0xf];
  for (int i = 0; i < 16; ++i)
    id[12 + i] = digits[(a >> (i * 4)) & 0xf];
  for (int i = 0; i < 4; ++i)
    id[28 + i] = digits[(b >> (i * 4)) & 0xf];
  return id;
}

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

namespace {

/// Returns `<host>-<pid>-<random>`: the default executor id, new for every
/// process (see `config::executor_id`).
std::string process_executor_id() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
    std::snprintf(host, sizeof host, "host");
  return std::string{host} + "-" + std::to_string(::getpid()) + "-"
         + random_id().substr(20);
}

} // namespace

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

runtime_impl::client_call::client_call(runtime_impl& rt) : rt_(rt) {
  std::lock_guard guard{rt_.active_mtx_};
  if (!rt_.running_)
    throw perdure::error(errc::not_running,
                         "start() the runtime before starting work");
  ++rt_.client_calls_;
}

runtime_impl::client_call::~client_call() {
  std::lock_guard guard{rt_.active_mtx_};
  if (--rt_.client_calls_ == 0)
    rt_.clients_done_.notify_all();
}

void runtime_impl::start_client() {
  auto opts = store_options();
  control_ = persistence::open_store(opts);
  control_->migrate();
  stores = std::make_unique<store_pool>(opts, cfg.pooled_connections);
  std::lock_guard guard{active_mtx_};
  running_ = true;
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
      // Application threads may be in calls already (running_ was set).
      std::unique_lock guard{active_mtx_};
      running_ = false;
      clients_done_.wait(guard, [this] { return client_calls_ == 0; });
    }
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
  // Listening before any run looks at the store: a delivery committed
  // after a run's look is then heard of.
  listener = persistence::listen_for_deliveries(
    opts, [this](const std::string& notice) { on_notice(notice); });
  recover();
  objects->recover(true);
  if (queues) // after recovery: what it claims is not this process's yet
    queues->start();
  housekeeper_ = std::make_unique<ticker>(std::chrono::milliseconds{100},
                                          [this] { housekeeping(); });
}

void runtime_impl::on_notice(const std::string& notice) {
  std::lock_guard guard{active_mtx_};
  if (!running_)
    return; // stop() lets the executors go only after clearing running_
  using persistence::delivery_listener;
  if (notice == delivery_listener::sweep_notice) {
    control->post([this] { sweep(); });
  } else if (notice == delivery_listener::missed_notices) {
    // Runs in memory may have missed theirs too: each looks again; so do
    // the keys held here (calls from other processes).
    for (auto& [id, a] : active_)
      signal_run(a.actor, a.exec, run_signal::wake, -1);
    control->post([this] { sweep(); });
    take_over_locked(std::nullopt);
  } else if (notice.size() > 2 && notice[0] == 'w') {
    auto id = notice.substr(2);
    auto i = active_.find(id);
    if (i != active_.end()) {
      ++i->second.wakes;
      signal_run(i->second.actor, i->second.exec, run_signal::wake, -1);
    } else {
      control->post([this, id = std::move(id)] { revive(id); });
    }
  } else if (notice.size() > 2 && notice[0] == 'c') {
    control->post([this, id = notice.substr(2)] { cancelled(id); });
  } else if (notice.size() > 2 && notice[0] == 'k') {
    // k:<id>: saga <id> was asked to cancel.
    control->post([this, id = notice.substr(2)] { cancel_signalled(id); });
  } else if (notice.size() > 2 && notice[0] == 'q') {
    // q:<queue>: items were enqueued (or came back) there.
    if (queues)
      queues->notice(notice.substr(2));
  } else if (notice.size() > 2 && notice[0] == 'x') {
    // x:<executor>: it lapsed or stopped; its runs are up for takeover.
    take_over_locked(std::nullopt);
  } else if (notice.size() > 2 && notice[0] == 'n') {
    // n:<id>: a client started run <id>; whoever can run it adopts it.
    take_over_locked(notice.substr(2));
  } else if (notice.size() > 2 && notice[0] == 'o') {
    // o:<type>\x1f<key>: invocations were stored for that key.
    auto sep = notice.find('\x1f', 2);
    if (sep == std::string::npos)
      return;
    auto type = notice.substr(2, sep - 2);
    if (object_types.count(type) == 0)
      return;
    control->post([this, type = std::move(type), key = notice.substr(sep + 1)] {
      objects->reach(type, key, false);
    });
  }
}

void runtime_impl::recover() {
  // Runs of this id it cannot run (restarted without their workflow, or
  // at another version) go to processes that can.
  auto released = with_control([&](persistence::store& db) {
    auto n = db.release_unclaimable(cfg.executor_id, filter_);
    if (n > 0)
      db.notify("x:" + cfg.executor_id);
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
    std::unique_lock guard{active_mtx_};
    if (!running_)
      return;
    running_ = false;
    clients_done_.wait(guard, [this] { return client_calls_ == 0; });
  }
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

void runtime_impl::announce(char kind, const std::string& id) {
  if (is_active(id))
    return;
  try {
    stores->with([&](persistence::store& db) {
      db.notify(std::string{kind} + ":" + id);
    });
  } catch (const std::exception& ex) {
    // Stored anyway: the owner's sweep finds it.
    log().warn("perdure: could not announce a delivery to run {}: {}", id,
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
    announce('w', *run->parent_id);
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
    announce(c.signalled ? 'k' : 'c', c.id);
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

void on_run_end(runtime_impl& rt, const std::string& id,
                std::function<void()> done) {
  rt.on_end(id, std::move(done));
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

namespace {

std::optional<run_outcome> stored_outcome(runtime_impl& rt,
                                          const std::string& id) {
  auto run = rt.with_control(
    [&](persistence::store& db) { return db.get_run(id); });
  if (!run)
    throw error(errc::not_found, "no workflow run with id '" + id + "'");
  if (!is_terminal(run->status))
    return std::nullopt;
  return run_outcome{run->status, std::move(run->output),
                     std::move(run->error)};
}

} // namespace

run_outcome await_run(runtime_impl& rt, const std::string& id,
                      std::chrono::milliseconds timeout) {
  if (!rt.running())
    throw error(errc::not_running, "the runtime is not running");
  using clock = std::chrono::steady_clock;
  auto deadline = saturating_deadline(timeout);
  rt.watch(id);
  struct unwatch_guard {
    runtime_impl& rt;
    const std::string& id;
    ~unwatch_guard() {
      rt.unwatch(id);
    }
  } guard{rt, id};
  for (bool waited_long = false;; ) {
    // Watch first, then read: an end committed in between is never missed.
    // A run this runtime is running reports its end, or its actor's stop
    // (e.g. fenced), to the watch: no read, no polling at poll_interval
    // (with hundreds of waiters, those reads and wake-ups cost more CPU
    // than the runs). Any other run may end elsewhere: poll the store. A
    // long wait that saw nothing reads too, should an end go unreported.
    auto stops = rt.stops(id);
    bool here = rt.is_active(id);
    if (!here || waited_long)
      if (auto outcome = stored_outcome(rt, id))
        return *outcome;
    auto now = clock::now();
    if (now >= deadline)
      throw error(errc::timeout,
                  "workflow '" + id + "' still running after the timeout");
    auto poll = here ? std::max<clock::duration>(rt.cfg.poll_interval,
                                                 std::chrono::seconds{1})
                     : clock::duration{rt.cfg.poll_interval};
    auto wait = std::min<clock::duration>(poll, deadline - now);
    if (auto outcome = rt.wait_ended(
          id, std::chrono::ceil<std::chrono::milliseconds>(wait), stops))
      return *outcome;
    waited_long = here && rt.stops(id) == stops;
  }
}

run_status status_of(runtime_impl& rt, const std::string& id) {
  if (!rt.running())
    throw error(errc::not_running, "the runtime is not running");
  auto run = rt.with_control(
    [&](persistence::store& db) { return db.get_run(id); });
  if (!run)
    throw error(errc::not_found, "no workflow run with id '" + id + "'");
  if (run->status == run_status::pending
      && run->saga_phase == persistence::saga_phase::compensating)
    return run_status::compensating;
  return run->status;
}

void cancel_run(runtime_impl& rt, const std::string& id) {
  runtime_impl::client_call call{rt};
  auto cancelled = rt.stores->with([&](persistence::store& db) {
    return db.cancel_run(id, rt.clock->now_ms());
  });
  if (cancelled.empty()) {
    auto run = rt.stores->with(
      [&](persistence::store& db) { return db.get_run(id); });
    if (!run)
      throw error(errc::not_found, "no workflow run with id '" + id + "'");
    // Ended already -- or cancelled by this very call, whose commit reply
    // was lost and whose retry found it CANCELLED (M5): telling its actor
    // and its parent again is harmless, and without it the actor ran on
    // until its next write was refused. (Its cancelled descendants are
    // refused at their next write as before.)
    if (run->status == run_status::cancelled) {
      rt.apply_cancel({{id, false}});
      rt.tell_parent(id);
    }
    return;
  }
  rt.apply_cancel(cancelled);
  rt.tell_parent(id);
}

void throw_run_failure(const std::string& id, const run_outcome& outcome) {
  auto reason = outcome.error.value_or("no reason recorded");
  switch (outcome.status) {
    case run_status::cancelled:
      throw error(errc::workflow_cancelled,
                  "workflow '" + id + "' was cancelled: " + reason);
    case run_status::retries_exceeded:
      throw error(errc::retries_exceeded,
                  "workflow '" + id + "' exceeded its recovery attempts: "
                    + reason);
    case run_status::compensated:
      throw error(errc::compensated,
                  "saga '" + id + "' was compensated: " + reason);
    case run_status::compensation_failed:
      throw error(errc::compensation_failed,
                  "saga '" + id + "' could not undo everything: " + reason);
    case run_status::dead_letter:
      throw error(errc::dead_letter,
                  "queue item '" + id + "' was dead-lettered: " + reason);
    default:
      throw error(errc::workflow_failed,
                  "workflow '" + id + "' failed: " + reason);
  }
}

} // namespace detail

// -- client ---------------------------------------------------------------------

client::client(config cfg)
  : impl_(std::make_shared<detail::runtime_impl>(std::move(cfg), true)) {
  impl_->start();
}

client::client(runtime_mode, config cfg)
  : impl_(std::make_shared<detail::runtime_impl>(std::move(cfg), false)) {
}

client::~client() {
  try {
    impl_->stop();
  } catch (const std::exception& ex) {
    impl_->log().error("perdure: {}", ex.what());
  }
}

const config& client::cfg() const noexcept {
  return impl_->cfg;
}

run_page client::list_runs(const run_filter& filter) {
  detail::runtime_impl::client_call call{*impl_};
  return impl_->stores->with(
    [&](persistence::store& db) { return db.list_runs(filter); });
}

std::vector<step_record> client::history(const std::string& id) {
  detail::runtime_impl::client_call call{*impl_};
  auto [run, journal] = impl_->stores->with([&](persistence::store& db) {
    return std::make_pair(db.get_run(id), db.load_journals({id}));
  });
  if (!run)
    throw error(errc::not_found, "no workflow run with id '" + id + "'");
  std::vector<step_record> steps;
  for (auto& e : journal) {
    step_record s;
    s.seq = e.seq;
    s.kind = persistence::to_string(e.kind);
    s.name = std::move(e.name);
    switch (e.outcome) {
      case persistence::outcome::value: s.outcome = "value"; break;
      case persistence::outcome::failed: s.outcome = "failed"; break;
      case persistence::outcome::terminal: s.outcome = "terminal"; break;
      default: s.outcome = "unreadable"; break;
    }
    s.payload = std::move(e.payload);
    s.error = std::move(e.error);
    s.at = std::chrono::system_clock::time_point{
      std::chrono::milliseconds{e.created_at_ms}};
    steps.push_back(std::move(s));
  }
  return steps;
}

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

namespace {

/// Throws unless `existing`, found under the id of `run`, is the same start
/// (same workflow, same inputs): a start with a taken id returns that run.
void check_same_start(const persistence::run_record& existing,
                      const persistence::run_record& run) {
  if (existing.name != run.name)
    throw error(errc::conflicting_id,
                "workflow id '" + run.id + "' already names a run of '"
                  + existing.name + "'");
  if (existing.inputs != run.inputs)
    throw error(errc::conflicting_id,
                "workflow id '" + run.id
                  + "' already names a run with other inputs");
}

/// Starts `run` from a client: stored unowned, then announced, so that a
/// runtime that registered its workflow adopts it.
void start_unowned(detail::runtime_impl& rt, persistence::run_record run) {
  run.owner = {persistence::unowned_executor, 0};
  auto result = rt.stores->with(
    [&](persistence::store& db) { return db.create_run(run); });
  if (!result.created) {
    check_same_start(result.run, run);
    return;
  }
  try {
    rt.stores->with(
      [&](persistence::store& db) { db.notify("n:" + run.id); });
  } catch (const std::exception& ex) {
    // Stored anyway: runtimes find unowned runs every few seconds.
    rt.log().warn("perdure: could not announce run {}: {}", run.id, ex.what());
  }
}

} // namespace

std::string client::start_run(std::string_view name, std::string inputs,
                               start_options opts) {
  if (!impl_->running())
    throw error(errc::not_running, "start() the runtime before starting work");
  detail::check_name("workflow name", name);
  if (!impl_->client_mode && impl_->workflows.count(std::string{name}) == 0)
    throw error(errc::unknown_workflow,
                "no workflow registered as '" + std::string{name} + "'");
  if (!impl_->client_mode)
    impl_->check_lease();
  if (opts.id.empty())
    opts.id = detail::random_id();
  detail::check_name("workflow id", opts.id);
  if (inputs.size() > impl_->cfg.max_payload_bytes)
    throw error(errc::payload_too_large,
                "inputs of " + std::to_string(inputs.size())
                  + " bytes exceed the limit of "
                  + std::to_string(impl_->cfg.max_payload_bytes));
  persistence::run_record run;
  run.id = opts.id;
  run.name = std::string{name};
  run.status = run_status::pending;
  run.inputs = std::move(inputs);
  run.owner = {impl_->cfg.executor_id, 1};
  run.app_version = impl_->cfg.app_version;
  run.created_at_ms = detail::now_ms();
  if (opts.timeout.count() > 0)
    run.deadline_ms = detail::saturating_add(impl_->clock->now_ms(),
                                             opts.timeout.count());
  detail::runtime_impl::client_call call{*impl_};
  if (impl_->client_mode) {
    start_unowned(*impl_, std::move(run));
    return opts.id;
  }
  // Through the group-commit writer: starts from many threads share a
  // commit. Durable first, then delivered: the run exists before its actor.
  std::promise<persistence::write_result> created;
  auto written = created.get_future();
  impl_->writer->create(run, [&created](persistence::write_result r) {
    created.set_value(std::move(r));
  });
  auto result = written.get();
  switch (result.ack) {
    case persistence::write_ack::committed:
      impl_->spawn_run(std::move(run), {}); // arms its deadline
      return opts.id;
    case persistence::write_ack::failed:
    case persistence::write_ack::superseded:
      // The commit may have happened all the same: if the run exists, it
      // runs (housekeeping finds it); a start with this id returns it.
      impl_->orphaned(run.id);
      throw error(result.error == errc::store_full ? errc::store_full
                                                   : errc::store_unavailable,
                  "could not record the start of workflow '" + run.id
                    + "': the database is "
                    + (result.error == errc::store_full ? "full"
                                                        : "unavailable"));
    case persistence::write_ack::rejected:
      break;
  }
  // The id was taken: the same start again (or our own in-doubt commit
  // re-sent) returns that run; another name or other inputs is a conflict.
  auto existing = impl_->stores->with([&](persistence::store& db) {
    return db.get_run(run.id);
  });
  if (!existing)
    throw error(errc::store_error, "run '" + run.id + "' vanished");
  check_same_start(*existing, run);
  if (existing->status == run_status::pending && existing->owner == run.owner
      && !impl_->is_active(run.id)) {
    // Ours and not running: a creation whose acknowledgement was lost.
    auto journal = impl_->stores->with([&](persistence::store& db) {
      return db.load_journals({run.id});
    });
    impl_->spawn_run(std::move(*existing), std::move(journal));
  }
  return opts.id;
}

void client::cancel(const std::string& id) {
  detail::cancel_run(*impl_, id);
}

namespace {

/// Throws `payload_too_large` if `bytes` exceed the configured limit.
void check_payload(const config& cfg, const std::string& bytes,
                   const char* what) {
  if (bytes.size() > cfg.max_payload_bytes)
    throw error(errc::payload_too_large,
                std::string{what} + " of " + std::to_string(bytes.size())
                  + " bytes exceeds the limit of "
                  + std::to_string(cfg.max_payload_bytes));
}

/// Stores `r` and wakes its run; throws for unknown or repeated ones.
void store_resolution(detail::runtime_impl& rt, persistence::resolution& r,
                      bool ok, std::string bytes, const std::string& what) {
  r.result = ok ? persistence::outcome::value : persistence::outcome::terminal;
  if (ok)
    r.payload = std::move(bytes);
  else
    r.error = persistence::valid_text(bytes);
  r.at_ms = rt.clock->now_ms();
  auto result = rt.stores->with(
    [&](persistence::store& db) { return db.resolve(r); });
  switch (result) {
    case persistence::resolve_result::unknown_id:
      throw error(errc::not_found, "no " + what);
    case persistence::resolve_result::already_resolved:
      throw error(errc::already_resolved,
                  what + " was already resolved or rejected");
    case persistence::resolve_result::resolved:
      rt.wake(r.run_id, -1);
      rt.announce('w', r.run_id);
      return;
  }
}

} // namespace

void client::resolve(const std::string& id, bool ok, std::string bytes) {
  detail::runtime_impl::client_call call{*impl_};
  check_payload(impl_->cfg, bytes, "awakeable value");
  // awk_<seq>_<run id>: the journal entry that created it.
  auto unknown = [&] {
    return error(errc::not_found, "no awakeable with id '"
                                    + persistence::valid_text(id) + "'");
  };
  auto parsed = detail::parse_awakeable_id(id);
  if (!parsed)
    throw unknown();
  auto& r = *parsed;
  store_resolution(*impl_, r, ok, std::move(bytes),
                   "awakeable with id '" + persistence::valid_text(id) + "'");
}

void client::complete_promise(const std::string& workflow_id,
                               const std::string& name, bool ok,
                               std::string bytes) {
  detail::runtime_impl::client_call call{*impl_};
  check_payload(impl_->cfg, bytes, "promise value");
  detail::check_name("workflow id", workflow_id);
  detail::check_name("promise name", name);
  persistence::resolution r;
  r.id = detail::promise_id(workflow_id, name);
  r.run_id = workflow_id;
  r.seq = -1;
  store_resolution(*impl_, r, ok, std::move(bytes),
                   "workflow run '" + workflow_id + "' (promise '" + name
                     + "')");
}

void client::send_bytes(const std::string& workflow_id,
                         const std::string& topic, std::string bytes) {
  detail::runtime_impl::client_call call{*impl_};
  check_payload(impl_->cfg, bytes, "message");
  detail::check_name("workflow id", workflow_id);
  detail::check_name("topic", topic);
  auto sent = impl_->stores->with([&](persistence::store& db) {
    return db.send_message(workflow_id, topic, bytes, impl_->clock->now_ms());
  });
  if (!sent)
    throw error(errc::not_found, "no workflow run with id '"
                                   + persistence::valid_text(workflow_id) + "'");
  impl_->wake(workflow_id, -1);
  impl_->announce('w', workflow_id);
}

std::optional<std::string>
client::event_bytes(const std::string& workflow_id, const std::string& key,
                     std::chrono::milliseconds timeout) {
  detail::check_name("workflow id", workflow_id);
  detail::check_name("event key", key);
  auto until = saturating_deadline(timeout);
  auto pause = std::chrono::milliseconds{5};
  for (;;) {
    {
      detail::runtime_impl::client_call call{*impl_};
      auto value = impl_->stores->with(
        [&](persistence::store& db) { return db.get_event(workflow_id, key); });
      if (value)
        return value;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= until)
      return std::nullopt;
    // Polling, backing off from 5 ms to `poll_interval`: events are read
    // far less often than steps are written.
    std::this_thread::sleep_for(
      std::min<std::chrono::steady_clock::duration>(until - now, pause));
    pause = std::min(pause * 2, std::max(impl_->cfg.poll_interval,
                                         std::chrono::milliseconds{5}));
  }
}

} // namespace perdure
