// The process the object crash tests kill. It calls "deposit" on K
// "account" objects, `calls` times in all from T threads, each call with its
// own idempotency key ("c<n>"), and prints every reply ("R <n> <total>").
// Killed and started again, it calls again with the same keys: a call that
// ran gets its recorded reply. The handler takes a probe (side table
// `probe`, one row per key while a handler holds it) in a step: a second
// holder of one key at once is recorded in `overlaps`.
//
//   perdure-object-worker <url> <schema> <executor> <calls> <keys> <threads>
//                         [poison|async]
//
// With "async" it makes every call at once with `call_async` (all in
// flight) and prints each reply from its callback ("E <n> <what>" for an
// end that is not a reply).
//
// With "poison" it sends one call whose handler kills its process (SIGKILL)
// and waits for its end: started again and again, the call must end
// RETRIES_EXCEEDED (max_recovery_attempts 2) instead of killing forever.

#include <atomic>
#include <csignal>
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

struct account {
  std::int64_t total = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(total));
  }
};

test::database db;
std::string executor;

/// Holds key `key`'s probe for a moment; records any other holder seen.
void probe(const std::string& key) {
  auto& sql = test::thread_client(db);
  auto table = sql.table("probe");
  auto holder = sql.exec("SELECT holder FROM " + table + " WHERE key = $1",
                         {key});
  if (!holder.rows.empty() && holder.rows[0][0].value_or("") != executor)
    sql.exec("INSERT INTO " + sql.table("overlaps")
               + " (key, seen, me, at) VALUES ($1, $2, $3, $4)",
             {key, holder.rows[0][0].value_or(""), executor,
              test::wall_ms()});
  sql.exec("DELETE FROM " + table + " WHERE key = $1", {key});
  sql.exec("INSERT INTO " + table + " (key, holder) VALUES ($1, $2)",
           {key, executor});
  std::this_thread::sleep_for(2ms);
  sql.exec("DELETE FROM " + table + " WHERE key = $1 AND holder = $2",
           {key, executor});
}

} // namespace

int main(int argc, char** argv) {
  test::worker_logs_to_stderr(); // stdout carries what the test reads
  if (argc != 7 && argc != 8) {
    std::cerr << "usage: perdure-object-worker <url> <schema> <executor> "
                 "<calls> <keys> <threads>\n";
    return 2;
  }
  db = test::database::named(argv[1], argv[2]);
  executor = argv[3];
  int calls = std::stoi(argv[4]);
  int keys = std::stoi(argv[5]);
  int threads = std::stoi(argv[6]);
  std::string mode = argc == 8 ? argv[7] : "";
  bool poison = mode == "poison";
  auto cfg = db.runtime_config(executor);
  cfg.lease_timeout = 2s;
  cfg.max_recovery_attempts = 2;
  runtime rt{cfg};
  rt.register_object<account>("account").handler(
    "deposit",
    [](object_context<account>& ctx, std::int64_t n) -> task<std::int64_t> {
      co_await ctx.step("probe", [&] {
        probe(ctx.key());
        return 0;
      });
      ctx.state().total += n;
      co_return ctx.state().total;
    })
    .handler("poison", [](object_context<account>& ctx) -> task<void> {
      co_await ctx.step("die", [] {
        std::raise(SIGKILL);
        return 0;
      });
      ctx.state().total = -1;
    });
  rt.start();
  std::cout << "READY" << std::endl;
  if (poison) {
    auto h = rt.send<void>("account", "acct-poison", "poison",
                           {.idempotency_key = "p"});
    try {
      h.get(60s);
      std::cout << "ENDED SUCCESS" << std::endl;
    } catch (const error& ex) {
      std::cout << "ENDED " << to_string(h.status()) << std::endl;
    }
    return 0;
  }
  std::mutex out;
  auto key_of = [&](int n) { return "acct-" + std::to_string(n % keys); };
  if (mode == "async") {
    std::condition_variable all_in;
    int ended = 0;
    for (int n = 0; n < calls; ++n)
      rt.call_async<std::int64_t>(
        "account", key_of(n), "deposit", std::int64_t{1},
        [&, n](call_result<std::int64_t> r) {
          std::lock_guard guard{out};
          try {
            std::cout << "R " << n << " " << r.get() << std::endl;
          } catch (const std::exception& ex) {
            std::cout << "E " << n << " " << ex.what() << std::endl;
          }
          ++ended;
          all_in.notify_all();
        },
        {.idempotency_key = "c" + std::to_string(n)});
    {
      std::unique_lock guard{out};
      all_in.wait(guard, [&] { return ended == calls; });
      std::cout << "DONE" << std::endl;
    }
    rt.stop(); // before what the callbacks use goes
    return 0;
  }
  std::atomic<int> next{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t)
    callers.emplace_back([&] {
      for (int n; (n = next.fetch_add(1)) < calls;) {
        auto reply = rt.call<std::int64_t>(
          "account", key_of(n), "deposit",
          std::int64_t{1}, {.idempotency_key = "c" + std::to_string(n)});
        std::lock_guard guard{out};
        std::cout << "R " << n << " " << reply << std::endl;
      }
    });
  for (auto& t : callers)
    t.join();
  std::cout << "DONE" << std::endl;
  return 0;
}
