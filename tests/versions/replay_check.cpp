// A replay check as a team runs it in CI: the workflows of the code about
// to be deployed, registered on a replayer, and each exported run given on
// the command line replayed on them (perdure_add_replay_tests makes one
// ctest case per file of tests/versions/exported/).

#include "perdure/perdure.hpp"
#include "perdure/testing/replay.hpp"

using namespace perdure;

namespace {

/// "pay" as it is today: reserve, wait for "go", charge.
task<int> pay(workflow_context& ctx, int amount) {
  auto r = co_await ctx.step("reserve", [] { return 1; });
  auto go = co_await ctx.recv<int>("go");
  auto c = co_await ctx.step("charge", [&] { return amount; });
  co_return r + go + c;
}

} // namespace

int main(int argc, char** argv) {
  perdure::testing::replayer checker;
  checker.register_workflow("pay", pay);
  return checker.main(argc, argv);
}
