#include "torture/workload.hpp"

#include <unistd.h>

#include <chrono>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"
#include "perdure/sagas/saga.hpp"

using namespace std::chrono_literals;

namespace perdure::torture {

namespace {

workload_env env;

std::string pid() {
  return std::to_string(::getpid());
}

std::string now() {
  return std::to_string(mono_ns());
}

/// A step body begins: log it, and check that the step has no checkpoint
/// yet (a body running after its checkpoint committed is a violation). The
/// probe goes straight to the server; while it is down it is skipped.
void step_body(const std::string& run, const std::string& step) {
  env.log->write({"B", now(), pid(), run, step});
  try {
    auto& sql = test::thread_client(env.direct);
    auto rows = sql.exec("SELECT seq, created_at FROM " + sql.table("journal")
                           + " WHERE run_id = $1 AND name = $2 AND outcome = 0"
                             " AND kind IN ('step', 'transaction')",
                         {run, step});
    if (!rows.rows.empty())
      env.log->write({"BAD_STEP", now(), pid(), run, step,
                      "checkpointed_at_ms=" + rows.rows[0][1].value_or(""),
                      "now_ms=" + std::to_string(test::wall_ms())});
  } catch (const std::exception&) {
    env.log->write({"NOPROBE", now(), pid(), run, step});
  }
}

// -- workflows -------------------------------------------------------------

struct order_input {
  int n = 0;
  bool child = false;
  int sleep_ms = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(n), CEREAL_NVP(child), CEREAL_NVP(sleep_ms));
  }
};

void insert_tx_row(sql_session& s, const std::string& run,
                   const std::string& name) {
  s.exec_params("INSERT INTO torture_tx (run_id, name) VALUES ($1, $2)", run,
                name);
}

const retry_policy patient{.max_attempts = 30,
                           .initial_delay = 100ms,
                           .backoff = 1.5,
                           .max_delay = 2s};

task<int> leaf(workflow_context& ctx, int n) {
  auto id = ctx.workflow_id();
  auto body = [&] {
    step_body(id, "leaf-step");
    return n + 1;
  };
  auto v = co_await ctx.step("leaf-step", body);
  auto tx = [&](sql_session& s) { insert_tx_row(s, id, "leaf-tx"); };
  co_await ctx.transaction("leaf-tx", tx, patient);
  co_return v;
}

/// Steps, a transaction, a child, a sleep, an awakeable the client
/// resolves, a message the client sends, and a last step.
task<int> order(workflow_context& ctx, order_input in) {
  auto id = ctx.workflow_id();
  auto reserve = [&] {
    step_body(id, "reserve");
    return in.n;
  };
  int total = co_await ctx.step("reserve", reserve);
  auto record = [&](sql_session& s) { insert_tx_row(s, id, "record"); };
  co_await ctx.transaction("record", record, patient);
  if (in.child) {
    auto child = co_await ctx.start_child<int>("leaf", in.n);
    total += co_await child;
  }
  co_await ctx.sleep(std::chrono::milliseconds{in.sleep_ms});
  auto approval = co_await ctx.awakeable<int>();
  co_await ctx.set_event("awakeable", approval.id());
  total += co_await approval;
  total += co_await ctx.recv<int>("go");
  auto finish = [&] {
    step_body(id, "finish");
    return 0;
  };
  co_await ctx.step("finish", finish);
  co_return total;
}

// -- accounts ----------------------------------------------------------------

struct payment {
  std::string to;
  std::int64_t amount = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(to), CEREAL_NVP(amount));
  }
};

/// Brackets an exclusive handler's run in the log, for the overlap probe.
struct holding {
  std::string type, key, run;
  holding(std::string t, std::string k, std::string r)
    : type(std::move(t)), key(std::move(k)), run(std::move(r)) {
    env.log->write({"E", now(), pid(), type, key, run});
  }
  ~holding() {
    env.log->write({"X", now(), pid(), type, key, run});
  }
};

task<std::int64_t> open_account(object_context<account>& ctx,
                                std::int64_t amount) {
  holding h{"account", ctx.key(), ctx.workflow_id()};
  if (!ctx.state().opened) {
    ctx.state().opened = true;
    ctx.state().balance += amount;
  }
  co_return ctx.state().balance;
}

task<std::int64_t> deposit(object_context<account>& ctx, std::int64_t amount) {
  holding h{"account", ctx.key(), ctx.workflow_id()};
  ctx.state().balance += amount;
  co_return ctx.state().balance;
}

task<std::int64_t> withdraw(object_context<account>& ctx,
                            std::int64_t amount) {
  holding h{"account", ctx.key(), ctx.workflow_id()};
  // A step inside the handler: the key is held across a durable operation.
  auto pause = [] {
    std::this_thread::sleep_for(1ms);
    return 0;
  };
  co_await ctx.step("check", pause);
  if (ctx.state().balance < amount)
    throw terminal_error("insufficient funds");
  ctx.state().balance -= amount;
  co_return ctx.state().balance;
}

/// Pays `p.amount` to another account: an object sending to an object.
task<std::int64_t> pay(object_context<account>& ctx, payment p) {
  holding h{"account", ctx.key(), ctx.workflow_id()};
  if (ctx.state().balance >= p.amount && p.to != ctx.key()) {
    ctx.state().balance -= p.amount;
    co_await ctx.send<std::int64_t>("account", p.to, "deposit", p.amount);
  }
  co_return ctx.state().balance;
}

task<std::int64_t> balance(shared_object_context<account>& ctx) {
  co_return ctx.state().balance;
}

struct transfer_order {
  std::string from, to;
  std::int64_t amount = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(from), CEREAL_NVP(to), CEREAL_NVP(amount));
  }
};

task<bool> transfer(workflow_context& ctx, transfer_order t) {
  auto withdrawn = co_await ctx.send<std::int64_t>("account", t.from,
                                                   "withdraw", t.amount);
  try {
    co_await withdrawn;
  } catch (const terminal_error&) {
    co_return false;
  }
  co_await ctx.call<std::int64_t>("account", t.to, "deposit", t.amount);
  co_return true;
}

// -- trips (sagas over inventory objects) ------------------------------------

task<std::int64_t> stock(object_context<inventory>& ctx, std::int64_t n) {
  if (ctx.state().capacity == 0) {
    ctx.state().capacity = n;
    ctx.state().free = n;
  }
  co_return ctx.state().free;
}

task<std::int64_t> hold(object_context<inventory>& ctx, std::string trip) {
  auto& s = ctx.state();
  if (s.held_by.count(trip) == 0) {
    if (s.free == 0)
      throw terminal_error("sold out");
    --s.free;
    s.held_by.insert(trip);
  }
  co_return s.free;
}

task<std::int64_t> release(object_context<inventory>& ctx, std::string trip) {
  auto& s = ctx.state();
  if (s.held_by.erase(trip) > 0)
    ++s.free;
  co_return s.free;
}

struct trip_request {
  std::string fail; // flight, hotel, car, payment or nothing
  std::string key;  // inventory key
  int pause_ms = 0; // before paying (the client may cancel meanwhile)

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(fail), CEREAL_NVP(key), CEREAL_NVP(pause_ms));
  }
};

task<std::string> trip(workflow_context& ctx, trip_request req) {
  auto id = ctx.workflow_id();
  auto book = [&](sagas::saga& s) -> task<std::string> {
    for (std::string service : services) {
      auto undo = [&, service](const std::int64_t&) -> task<void> {
        co_await ctx.call<std::int64_t>(service, req.key, "release", id);
      };
      auto act = [&, service]() -> task<std::int64_t> {
        if (req.fail == service)
          throw terminal_error(service + " refused");
        co_return co_await ctx.call<std::int64_t>(service, req.key, "hold",
                                                  id);
      };
      co_await s.step(service, act, undo);
    }
    if (req.pause_ms > 0)
      co_await ctx.sleep(std::chrono::milliseconds{req.pause_ms});
    auto pay_body = [&] {
      if (req.fail == "payment")
        throw terminal_error("card declined");
      return true;
    };
    auto refund = [](const bool&) {};
    co_await s.step("payment", pay_body, refund);
    co_return std::string{"booked"};
  };
  co_return co_await sagas::run<std::string>(ctx, book);
}

// -- queue items ---------------------------------------------------------------

struct job_input {
  std::string partition;
  int mode = 0; // 0 succeeds, 1 fails half its attempts, 2 always fails
  int work_ms = 10;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(partition), CEREAL_NVP(mode), CEREAL_NVP(work_ms));
  }
};

task<std::string> job(workflow_context& ctx, std::string queue,
                      job_input in) {
  auto id = ctx.workflow_id();
  auto work = [&] {
    env.log->write({"QS", now(), pid(), queue, in.partition, id});
    std::this_thread::sleep_for(std::chrono::milliseconds{in.work_ms});
    env.log->write({"QE", now(), pid(), queue, in.partition, id});
    thread_local std::mt19937 rng{std::random_device{}()};
    if (in.mode == 2 || (in.mode == 1 && rng() % 2 == 0))
      throw std::runtime_error("the job failed (on purpose)");
    return 1;
  };
  co_await ctx.step("work", work, retry_policy{.max_attempts = 1});
  co_return std::string{"done"};
}

} // namespace

void register_workload(runtime& rt, workload_env e) {
  env = std::move(e);
  rt.register_workflow("leaf", leaf);
  rt.register_workflow("order", order);
  rt.register_workflow("transfer", transfer);
  rt.register_workflow("trip", trip);
  rt.register_workflow("job", [](workflow_context& ctx, job_input in) {
    return job(ctx, jobs_queue, std::move(in));
  });
  rt.register_workflow("slow_job", [](workflow_context& ctx, job_input in) {
    return job(ctx, slow_queue, std::move(in));
  });
  rt.register_object<account>("account")
    .handler("open", open_account)
    .handler("deposit", deposit)
    .handler("withdraw", withdraw)
    .handler("pay", pay)
    .handler("balance", balance);
  for (auto service : services)
    rt.register_object<inventory>(service)
      .handler("stock", stock)
      .handler("hold", hold)
      .handler("release", release);
  queues::register_queue(rt, jobs_queue,
                         {.concurrency = jobs_concurrency,
                          .worker_concurrency = 3,
                          .partition_concurrency = jobs_partition_concurrency,
                          .rate = queues::rate_limit{jobs_rate,
                                                     std::chrono::milliseconds{
                                                       jobs_rate_period_ms}},
                          .retry = {.max_attempts = 3, .backoff = 100ms},
                          .poll_interval = 1000ms});
  queues::register_queue(rt, slow_queue,
                         {.concurrency = slow_concurrency,
                          .worker_concurrency = 2,
                          .retry = {.max_attempts = 2, .backoff = 50ms},
                          .poll_interval = 1000ms});
}

// -- the client --------------------------------------------------------------

namespace {

/// Retries `f` while the database is unreachable or the call's outcome is
/// unknown: every call here is idempotent (fixed ids, idempotency keys).
template <class F>
auto retrying(F f) -> decltype(f()) {
  for (int tries = 0;; ++tries) {
    try {
      return f();
    } catch (const error& ex) {
      if (ex.code() != errc::store_unavailable && ex.code() != errc::store_error
          && ex.code() != errc::store_full && ex.code() != errc::timeout)
        throw;
      if (tries > 600)
        throw;
    }
    std::this_thread::sleep_for(200ms);
  }
}

std::string account_name(std::uint64_t n) {
  return "a" + std::to_string(n % accounts);
}

class client_thread {
public:
  client_thread(client& c, effects_log& log, std::string prefix,
                std::uint64_t seed)
    : c_(c), log_(log), prefix_(std::move(prefix)), rng_(seed) {
  }

  void one() {
    auto id = prefix_ + "-" + std::to_string(n_++);
    auto pick = rng_() % 100;
    if (pick < 28)
      run_order(id);
    else if (pick < 44)
      run_transfer(id);
    else if (pick < 52)
      run_deposit(id);
    else if (pick < 56)
      run_deposit_later(id);
    else if (pick < 61)
      run_pay(id);
    else if (pick < 73)
      run_trip(id);
    else if (pick < 92)
      run_job(id, jobs_queue, "job");
    else
      run_job(id, slow_queue, "slow_job");
  }

private:
  std::uint64_t below(std::uint64_t n) {
    return rng_() % n;
  }

  void started(const std::string& kind, const std::string& id) {
    log_.write({"STARTED", kind, id});
  }

  void run_order(const std::string& id) {
    order_input in{static_cast<int>(below(100)), below(2) == 0,
                   static_cast<int>(below(400))};
    auto fate = below(10); // 0: cancelled by the client, 1: by a deadline
    start_options opts{.id = id};
    if (fate == 1)
      opts.timeout = std::chrono::milliseconds{200 + below(400)};
    started("order", id);
    retrying([&] { return c_.start_workflow<int>("order", in, opts).id(); });
    retrying([&] {
      c_.send(id, "go", 1);
      return 0;
    });
    if (fate == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds{below(300)});
      retrying([&] {
        c_.cancel(id);
        return 0;
      });
      return;
    }
    // Resolve its awakeable once it is published, unless the run ended.
    for (;;) {
      auto awk = retrying([&] {
        return c_.get_event<std::string>(id, "awakeable", 2s);
      });
      if (awk) {
        try {
          retrying([&] {
            c_.resolve_awakeable(*awk, 1);
            return 0;
          });
        } catch (const error& ex) {
          if (ex.code() != errc::already_resolved)
            throw;
        }
        return;
      }
      auto status = retrying([&] {
        return c_.retrieve_workflow<int>(id).status();
      });
      if (status != run_status::pending && status != run_status::enqueued)
        return;
    }
  }

  void run_transfer(const std::string& id) {
    transfer_order t{account_name(rng_()), account_name(rng_()),
                     static_cast<std::int64_t>(1 + below(300))};
    started("transfer", id);
    retrying([&] {
      return c_.start_workflow<bool>("transfer", t, {.id = id}).id();
    });
  }

  /// Deposits with an idempotency key, twice: the second call must return
  /// the first one's reply (applied once).
  void run_deposit(const std::string& id) {
    auto acct = account_name(rng_());
    auto amount = static_cast<std::int64_t>(1 + below(50));
    log_.write({"DEP", id, acct, std::to_string(amount)});
    auto once = [&] {
      return retrying([&] {
        return c_.call<std::int64_t>("account", acct, "deposit", amount,
                                     {.idempotency_key = id});
      });
    };
    auto first = once();
    auto second = once();
    if (first != second)
      log_.write({"BAD_IDEMPOTENT", id, acct, std::to_string(first),
                  std::to_string(second)});
  }

  void run_deposit_later(const std::string& id) {
    auto acct = account_name(rng_());
    auto amount = static_cast<std::int64_t>(1 + below(50));
    log_.write({"DEP", id, acct, std::to_string(amount)});
    auto delay = std::chrono::milliseconds{below(1500)};
    retrying([&] {
      return c_.send_later("account", acct, "deposit", amount, delay,
                           {.idempotency_key = id})
        .id();
    });
  }

  void run_pay(const std::string& id) {
    auto from = account_name(rng_());
    payment p{account_name(rng_()), static_cast<std::int64_t>(1 + below(200))};
    started("pay", id);
    retrying([&] {
      return c_.send<std::int64_t>("account", from, "pay", p,
                                   {.idempotency_key = id})
        .id();
    });
  }

  void run_trip(const std::string& id) {
    static const char* fails[] = {"", "", "", "flight", "hotel",
                                  "car", "payment"};
    trip_request req{fails[below(7)], "k" + std::to_string(below(inventory_keys)),
                     below(4) == 0 ? static_cast<int>(200 + below(400)) : 0};
    started("trip", id);
    retrying([&] {
      return c_.start_workflow<std::string>("trip", req, {.id = id}).id();
    });
    if (req.pause_ms > 0 && below(2) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds{below(500)});
      retrying([&] {
        c_.cancel(id);
        return 0;
      });
    }
  }

  void run_job(const std::string& id, const char* queue,
               const char* workflow) {
    auto m = below(20);
    job_input in{"p" + std::to_string(below(4)),
                 m == 0 ? 2 : (m < 4 ? 1 : 0),
                 static_cast<int>(5 + below(40))};
    queues::enqueue_options opts{.id = id,
                                 .priority = static_cast<std::int32_t>(below(3)),
                                 .partition_key = in.partition};
    if (below(5) == 0)
      opts.dedup_id = "dd" + std::to_string(below(8));
    if (below(10) == 0)
      opts.delay = std::chrono::milliseconds{below(1000)};
    started(queue, id);
    auto got = retrying([&] {
      return queues::enqueue<std::string>(c_, queue, workflow, in, opts).id();
    });
    if (got != id)
      log_.write({"DEDUPED", id, got});
    else if (!opts.dedup_id.empty())
      log_.write({"QUEUED", now(), id}); // queued by now: for check_dedup
  }

  client& c_;
  effects_log& log_;
  std::string prefix_;
  std::mt19937_64 rng_;
  std::uint64_t n_ = 0;
};

} // namespace

void drive_client(client& c, effects_log& log, int index, std::uint64_t seed,
                  int threads, std::atomic<bool>& stop) {
  if (index == 0) { // open the accounts and stock the services once
    for (std::uint64_t a = 0; a < accounts; ++a)
      retrying([&] {
        return c.call<std::int64_t>("account", account_name(a), "open",
                                    opening, {.idempotency_key = "open-"
                                                                 + account_name(a)});
      });
    for (auto service : services)
      for (int k = 0; k < inventory_keys; ++k)
        retrying([&] {
          return c.call<std::int64_t>(service, "k" + std::to_string(k),
                                      "stock", capacity);
        });
    log.write({"READY"});
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      client_thread me{c, log,
                       "c" + std::to_string(index) + "t" + std::to_string(t),
                       seed * 1000 + static_cast<std::uint64_t>(index * 100 + t)};
      std::mt19937 pace{static_cast<unsigned>(seed + t)};
      while (!stop) {
        try {
          me.one();
        } catch (const std::exception& ex) {
          log.write({"CLIENT_ERROR", std::to_string(index),
                     std::string{"\""} + ex.what() + "\""});
        }
        std::this_thread::sleep_for(std::chrono::milliseconds{20 + pace() % 60});
      }
    });
  for (auto& t : pool)
    t.join();
}

} // namespace perdure::torture
