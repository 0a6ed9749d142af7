// A deploy with runs in flight: version 1 of "ship" books with the old
// carrier; orders wait for their parcel to be packed. Version 2 changes
// the booking behind a patch and is deployed while they wait: the orders
// that booked already keep the old carrier, the others and new orders take
// the new one, and none fails. Before it, a build of v1 changed without a
// patch blocks the runs that booked instead of failing them; v2, which
// replays them, takes them once they are moved to it.
//
//   PERDURE_DATABASE_URL=sqlite:///tmp/deploy.db ./perdure-deploy

#include <perdure/perdure.hpp>

#include <iostream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

perdure::task<std::string> ship_v1(perdure::workflow_context& ctx) {
  co_await ctx.recv<int>("paid");
  co_await ctx.step("book", [] { return std::string{"old carrier"}; });
  co_await ctx.recv<int>("packed");
  co_return std::string{"old carrier"};
}

perdure::task<std::string> ship_v2(perdure::workflow_context& ctx) {
  co_await ctx.recv<int>("paid");
  std::string carrier = "old carrier";
  if (co_await ctx.patched("carrier-v2")) {
    co_await ctx.step("book-v2", [] { return std::string{"new carrier"}; });
    carrier = "new carrier";
  } else {
    co_await ctx.step("book", [] { return std::string{"old carrier"}; });
  }
  co_await ctx.recv<int>("packed");
  co_return carrier;
}

/// v1 changed without a patch: the step renamed. Runs that booked with
/// "book" cannot replay it.
perdure::task<std::string> ship_unpatched(perdure::workflow_context& ctx) {
  co_await ctx.recv<int>("paid");
  co_await ctx.step("book-renamed", [] { return std::string{"new carrier"}; });
  co_await ctx.recv<int>("packed");
  co_return std::string{"new carrier"};
}

perdure::config at(const std::string& version) {
  auto cfg = perdure::config::from_env();
  cfg.app_version = version;
  return cfg;
}

} // namespace

int main() {
  std::vector<std::string> booked, waiting;
  {
    perdure::runtime v1{at("v1")};
    v1.register_workflow("ship", ship_v1);
    v1.start();
    std::cout << "v1: 4 orders paid (booked with the old carrier), 2 not yet\n";
    for (int i = 0; i < 6; ++i) {
      auto h = v1.start_workflow<std::string>("ship");
      (i < 4 ? booked : waiting).push_back(h.id());
      if (i < 4)
        v1.send(h.id(), "paid", 1);
    }
    std::this_thread::sleep_for(500ms); // they book
    v1.stop();
  }
  {
    std::cout << "a build of v1 changed without a patch: the runs that "
                 "booked cannot replay, and go BLOCKED instead of failing\n";
    perdure::runtime bad{at("v1")};
    bad.register_workflow("ship", ship_unpatched);
    bad.start();
    for (auto& id : booked) {
      auto h = bad.retrieve_workflow<std::string>(id);
      for (int i = 0; i < 100 && h.status() != perdure::run_status::blocked;
           ++i)
        std::this_thread::sleep_for(50ms);
      std::cout << "  " << id << " is " << to_string(h.status()) << "\n";
    }
    bad.stop();
  }
  perdure::runtime v2{at("v2")};
  v2.register_workflow("ship", ship_v2, {.patches = {"carrier-v2"}});
  v2.start();
  std::cout << "v2 deployed (patch carrier-v2); versions:\n";
  for (auto& v : v2.versions())
    std::cout << "  '" << v.app_version << "': " << v.live_executors
              << " live, " << v.pending << " pending, " << v.blocked
              << " blocked" << (v.stranded ? " (stranded)" : "") << "\n";
  auto moved = v2.move_runs("v1", "v2");
  std::cout << "moved to v2: " << moved
            << " runs (v2 replays the blocked ones)\n";
  auto fresh = v2.start_workflow<std::string>("ship");
  waiting.push_back(fresh.id());
  for (auto& id : waiting)
    v2.send(id, "paid", 1);
  for (auto* ids : {&booked, &waiting})
    for (auto& id : *ids) {
      v2.send(id, "packed", 1);
      auto carrier = v2.retrieve_workflow<std::string>(id).get(30s);
      std::cout << "  " << id << ": " << carrier << "\n";
    }
  std::cout << "every order shipped; none ended ERROR\n";
  return 0;
}
