// The option structs as the README writes them, compiled with -Wall
// -Wextra -Werror (ctest `options.readme_shapes`): a user's warnings-clean
// build must stay clean with Perdure's public structs.

#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"
#include "perdure/sagas/saga.hpp"

using namespace std::chrono_literals;

int main() {
  perdure::run_filter filter{.status = perdure::run_status::pending,
                             .name = "checkout", .limit = 50};
  perdure::start_options start{.id = "order-42", .timeout = 1h};
  perdure::call_options call{.idempotency_key = "payment-17"};
  perdure::retry_policy policy{.max_attempts = 5, .initial_delay = 1s};
  perdure::queues::queue_options queue{
    .concurrency = 10, .worker_concurrency = 8, .partition_concurrency = 2,
    .rate = perdure::queues::rate_limit{100, 1000ms},
    .retry = {.max_attempts = 3, .backoff = 1s}};
  perdure::queues::enqueue_options item{.priority = 0,
                                        .partition_key = "customer",
                                        .dedup_id = "welcome/1",
                                        .delay = 10min};
  (void)filter, (void)start, (void)call, (void)policy, (void)queue,
    (void)item;
  return 0;
}
