// Compiled by two tests (tests/CMakeLists.txt): forgetting `co_await` on a
// durable operation must not compile quietly (it would do nothing), and
// the same code with `co_await` must compile.

#include "perdure/perdure.hpp"

#ifdef PERDURE_AWAITED
#define MAYBE_AWAIT co_await
#else
#define MAYBE_AWAIT
#endif

perdure::task<int> forgetful(perdure::workflow_context& ctx) {
  MAYBE_AWAIT ctx.step("s", [] { return 1; });
  MAYBE_AWAIT ctx.set_event("k", 1);
  MAYBE_AWAIT ctx.sleep(std::chrono::seconds{1});
  co_return 0;
}

int main() {
  return 0;
}
