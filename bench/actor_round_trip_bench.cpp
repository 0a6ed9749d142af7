// The CAF floor under every step: a message to an actor and its answer
// back, both inside the actor system (the run actor's hops are of this
// kind), on the scheduler policy the runtime uses.

#include <benchmark/benchmark.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

namespace {

using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using go_atom = caf::atom_constant<caf::atom("go")>;

caf::behavior ponger(caf::event_based_actor*) {
  return {[](ping_atom, int n) { return caf::make_message(pong_atom::value, n); }};
}

/// Sends `rounds` pings one after the other, then answers the starter.
caf::behavior pinger(caf::event_based_actor* self, caf::actor peer) {
  return {
    [=](go_atom, int rounds) {
      auto rp = self->make_response_promise();
      self->send(peer, ping_atom::value, rounds);
      self->become(caf::keep_behavior, [=](pong_atom, int left) mutable {
        if (left == 1) {
          rp.deliver(true);
          self->unbecome();
          return;
        }
        self->send(peer, ping_atom::value, left - 1);
      });
      return rp;
    },
  };
}

void actor_round_trip(benchmark::State& state) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  cfg.set("scheduler.policy", caf::atom("sharing"));
  caf::actor_system sys{cfg};
  auto peer = sys.spawn(ponger);
  auto ping = sys.spawn(pinger, peer);
  constexpr int rounds = 10000;
  {
    caf::scoped_actor self{sys};
    for (auto _ : state) {
      self->request(ping, caf::infinite, go_atom::value, rounds)
        .receive([](bool) {}, [&](caf::error&) { state.SkipWithError("failed"); });
    }
  }
  state.SetItemsProcessed(state.iterations() * rounds);
  caf::anon_send_exit(ping, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(peer, caf::exit_reason::user_shutdown);
}

} // namespace

BENCHMARK(actor_round_trip)->UseRealTime();
