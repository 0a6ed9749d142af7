// A trip as a saga: a flight seat, a hotel room and a car, each held by a
// virtual object (the "services", with limited inventory), and the payment
// last. When a step fails for good, or the trip is cancelled, what was
// booked is released again, in reverse order -- also across a crash.
//
//   PERDURE_DATABASE_URL=sqlite:///tmp/trips.db ./perdure-trip-booking
//       [--fail flight|hotel|car|payment] [--cancel] [--crash | --resume]
//
// --crash kills the process while the compensations run; run it again with
// --resume and the saga finishes where it was. The output shows what was
// booked and undone, and that no seat, room or car went missing.

#include <perdure/perdure.hpp>
#include <perdure/sagas/saga.hpp>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <set>
#include <string>
#include <thread>

namespace {

/// One service's inventory: what is free, and which trips hold some.
struct inventory {
  std::int64_t free = 0;
  std::int64_t capacity = 0;
  std::set<std::string> held_by;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(free), CEREAL_NVP(capacity), CEREAL_NVP(held_by));
  }
};

perdure::task<std::int64_t> stock(perdure::object_context<inventory>& ctx,
                                  std::int64_t n) {
  if (ctx.state().capacity == 0) { // once: running again adds nothing
    ctx.state().capacity = n;
    ctx.state().free = n;
  }
  co_return ctx.state().free;
}

/// Holds one unit for `trip`; holding twice (a step run again) holds one.
/// Handlers run once per call (their effect commits with their end), so
/// this is where the output says what happened.
perdure::task<std::int64_t> hold(const char* service,
                                 perdure::object_context<inventory>& ctx,
                                 std::string trip) {
  auto& s = ctx.state();
  if (s.held_by.count(trip) == 0) {
    if (s.free == 0)
      throw perdure::terminal_error("sold out");
    --s.free;
    s.held_by.insert(trip);
    std::cout << "  booked " << service << " (" << s.free << " left)"
              << std::endl;
  }
  co_return s.free;
}

/// Releases `trip`'s unit; a release of nothing held is fine (a
/// compensation may run for a step whose effect never came).
perdure::task<std::int64_t> release(const char* service,
                                    perdure::object_context<inventory>& ctx,
                                    std::string trip) {
  auto& s = ctx.state();
  if (s.held_by.erase(trip) > 0) {
    ++s.free;
    std::cout << "  undone: " << service << " released" << std::endl;
  }
  co_return s.free;
}

perdure::task<std::int64_t> free_units(perdure::shared_object_context<inventory>& ctx) {
  co_return ctx.state().free;
}

/// Units neither free nor held by a trip: 0 unless inventory went missing.
perdure::task<std::int64_t> missing(perdure::shared_object_context<inventory>& ctx) {
  auto& s = ctx.state();
  co_return s.capacity - s.free - static_cast<std::int64_t>(s.held_by.size());
}

struct trip_request {
  std::string fail; // which step refuses: flight, hotel, car, payment
  bool pause = false; // waits before paying (to be cancelled meanwhile)

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(fail), CEREAL_NVP(pause));
  }
};

const char* const services[] = {"flight", "hotel", "car"};

/// --crash: this process kills itself after the first compensation.
bool crash_while_undoing = false;

/// Books a trip: each service held through its object, then the payment.
perdure::task<std::string> book_trip(perdure::workflow_context& ctx,
                                     trip_request req) {
  auto trip = ctx.workflow_id();
  co_return co_await perdure::sagas::run<std::string>(
    ctx, [&](perdure::sagas::saga& s) -> perdure::task<std::string> {
      for (std::string service : services) {
        // Named before co_await: it keeps `service` by value (GCC 12).
        auto undo = [&, service](const std::int64_t&) -> perdure::task<void> {
          co_await ctx.call<std::int64_t>(service, "main", "release", trip);
          if (crash_while_undoing) {
            std::cout << "killing the process in the middle of the "
                         "compensations"
                      << std::endl;
            std::raise(SIGKILL);
          }
        };
        co_await s.step(
          service,
          [&]() -> perdure::task<std::int64_t> {
            if (req.fail == service)
              throw perdure::terminal_error(service + " refused the booking");
            co_return co_await ctx.call<std::int64_t>(service, "main", "hold",
                                                      trip);
          },
          undo);
      }
      if (req.pause)
        co_await ctx.sleep(std::chrono::seconds{30});
      co_await s.step(
        "payment",
        [&] {
          if (req.fail == "payment")
            throw perdure::terminal_error("card declined");
          std::cout << "  paid" << std::endl; // a step: runs once
          return true;
        },
        [](const bool&) { std::cout << "  undone: payment refunded\n"; });
      co_return std::string{"booked"};
    });
}

} // namespace

int main(int argc, char** argv) {
  trip_request req;
  bool cancel = false;
  bool killed = false; // --crash, and --resume after it: one trip id
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--fail" && i + 1 < argc)
      req.fail = argv[++i];
    else if (a == "--cancel")
      cancel = req.pause = true;
    else if (a == "--crash")
      crash_while_undoing = killed = true;
    else if (a == "--resume")
      killed = true;
  }
  perdure::runtime rt{perdure::config::from_env()};
  for (auto service : services)
    rt.register_object<inventory>(service)
      .handler("stock", stock)
      .handler("hold",
               [service](perdure::object_context<inventory>& ctx,
                         std::string trip) { return hold(service, ctx, trip); })
      .handler("release",
               [service](perdure::object_context<inventory>& ctx,
                         std::string trip) {
                 return release(service, ctx, trip);
               })
      .handler("free", free_units)
      .handler("missing", missing);
  rt.register_workflow("book_trip", book_trip);
  rt.start(); // finishes a saga a killed run left
  for (auto service : services)
    rt.call<std::int64_t>(service, "main", "stock", std::int64_t{5});

  // One trip id per kind of run: running again returns the same trip.
  auto id = "trip-" + (req.fail.empty() ? std::string{"ok"} : req.fail)
            + (cancel ? "-cancelled" : "") + (killed ? "-killed" : "");
  std::cout << "trip " << id << ":" << std::endl;
  auto h = rt.start_workflow<std::string>("book_trip", req, {.id = id});
  if (cancel) {
    std::this_thread::sleep_for(std::chrono::seconds{1}); // it waits to pay
    std::cout << "  cancelling the trip" << std::endl;
    h.cancel();
  }
  try {
    auto result = h.get();
    std::cout << "result: " << result << "\n";
  } catch (const perdure::error& ex) {
    std::cout << "result: " << perdure::to_string(h.status()) << " -- "
              << ex.what() << "\n";
  }
  bool conserved = true;
  for (auto service : services) {
    auto free = rt.call<std::int64_t>(service, "main", "free");
    auto lost = rt.call<std::int64_t>(service, "main", "missing");
    std::cout << service << ": " << free << " of 5 free, " << lost
              << " missing\n";
    conserved = conserved && lost == 0;
  }
  std::cout << (conserved ? "inventory conserved\n" : "INVENTORY LOST\n");
  return conserved ? 0 : 1;
}
