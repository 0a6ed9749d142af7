// A newsletter fanned out through a rate-limited queue: every send is a
// queue item (a durable workflow run), at most 20 start per second across
// every process, at most 2 at once per customer, retried with backoff when
// the mail server refuses, dead-lettered when it keeps refusing. A signup
// enqueues its welcome mail in the same transaction that stores the user.
//
//   PERDURE_DATABASE_URL=sqlite:///tmp/mail.db ./perdure-email-queue
//
// The output shows the rate and the per-customer concurrency held, and
// what went to the dead letters.

#include <perdure/perdure.hpp>
#include <perdure/queues/queue.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

/// What the fake mail server saw: when each send began, and how many of
/// one customer's sends ran at once.
struct mail_server {
  std::mutex mtx;
  std::vector<std::chrono::steady_clock::time_point> starts;
  std::map<std::string, int> open, most;

  void begin(const std::string& customer) {
    std::lock_guard guard{mtx};
    starts.push_back(std::chrono::steady_clock::now());
    most[customer] = std::max(most[customer], ++open[customer]);
  }

  void end(const std::string& customer) {
    std::lock_guard guard{mtx};
    --open[customer];
  }
};

mail_server server;

/// One mail: (customer, address).
using mail = std::pair<std::string, std::string>;

perdure::task<std::string> send_email(perdure::workflow_context& ctx,
                                      mail m) {
  co_return co_await ctx.step(
    "smtp",
    [&] {
      server.begin(m.first);
      std::this_thread::sleep_for(60ms); // the mail server takes its time
      server.end(m.first);
      if (m.second.find("bounce") != std::string::npos)
        throw std::runtime_error("550 mailbox unavailable: " + m.second);
      return "sent to " + m.second;
    },
    perdure::retry_policy{.max_attempts = 1});
}

} // namespace

int main() {
  auto cfg = perdure::config::from_env();
  perdure::runtime rt{cfg};
  rt.register_workflow("send_email", send_email);
  // A signup stores the user and enqueues the welcome mail in one
  // transaction: no user without a mail, no mail without a user.
  rt.register_workflow(
    "signup", [](perdure::workflow_context& ctx,
                 std::string email) -> perdure::task<std::string> {
      co_return co_await ctx.transaction("store user", [&](perdure::sql_session&
                                                             s) {
        s.exec_params("CREATE TABLE IF NOT EXISTS demo_users (email TEXT "
                      "PRIMARY KEY)");
        s.exec_params("INSERT INTO demo_users (email) VALUES ($1) ON "
                      "CONFLICT DO NOTHING",
                      email);
        return perdure::queues::enqueue(s, "emails", "send_email",
                                        mail{"signups", email},
                                        {.dedup_id = "welcome/" + email});
      });
    });
  perdure::queues::register_queue(
    rt, "emails",
    {.worker_concurrency = 8,
     .partition_concurrency = 2,
     .rate = perdure::queues::rate_limit{20, 1000ms},
     .retry = {.max_attempts = 3, .backoff = 200ms}});
  rt.start();

  auto t0 = std::chrono::steady_clock::now();
  std::vector<perdure::workflow_handle<std::string>> sends;
  for (auto customer : {"acme", "globex", "initech"})
    for (int n = 0; n < 20; ++n) {
      auto address = std::string{customer} + "-" + std::to_string(n)
                     + (n == 7 && customer == std::string{"globex"}
                          ? "@bounce.example"
                          : "@example.com");
      // A fixed id per mail: running the demo again sends nothing twice.
      sends.push_back(perdure::queues::enqueue<std::string>(
        rt, "emails", "send_email", mail{customer, address},
        {.id = "newsletter-1/" + address, .partition_key = customer}));
    }
  auto welcome = rt.start_workflow<std::string>("signup",
                                                std::string{"new@example.com"},
                                                {.id = "signup/new"})
                   .get();
  std::cout << "signup enqueued its welcome mail as " << welcome << std::endl;

  auto stats = perdure::queues::stats(rt, "emails");
  std::cout << "queued " << stats.total.ready + stats.total.delayed
            << ", running " << stats.total.running << ", throttled "
            << stats.total.throttled << std::endl;

  int sent = 0;
  std::vector<std::string> dead;
  for (auto& h : sends) {
    try {
      h.get();
      ++sent;
    } catch (const perdure::error& ex) {
      if (ex.code() != perdure::errc::dead_letter)
        throw;
      dead.push_back(h.id());
    }
  }
  rt.retrieve_workflow<std::string>(welcome).get();
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - t0)
                .count();

  std::lock_guard guard{server.mtx};
  auto& starts = server.starts;
  std::sort(starts.begin(), starts.end());
  long window = 0;
  for (std::size_t i = 0; i < starts.size(); ++i)
    window = std::max<long>(
      window, std::upper_bound(starts.begin(), starts.end(), starts[i] + 999ms)
                - (starts.begin() + static_cast<std::ptrdiff_t>(i)));
  std::cout << "sent " << sent << " of " << sends.size() << " newsletter mails"
            << " in " << secs << " s (" << starts.size()
            << " attempts at the mail server, retries included)" << std::endl;
  if (starts.empty()) {
    std::cout << "nothing new to send: this newsletter went out before"
              << std::endl;
  } else {
    std::cout << "most attempts starting in any one second: " << window
              << " (limit 20)" << std::endl;
  }
  for (auto& [customer, most] : server.most)
    std::cout << "most sends at once for " << customer << ": " << most
              << " (limit 2)" << std::endl;
  for (auto& id : dead)
    std::cout << "dead letter: " << id
              << " (requeue it with perdure::queues::requeue once fixed)"
              << std::endl;
  std::cout << "dead letters in the queue: "
            << perdure::queues::stats(rt, "emails").dead_letters << std::endl;
  rt.stop();
  return window <= 20 ? 0 : 1;
}
