#include "perdure/detail/runtime/services.hpp"

#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/runs/completion_watchers.hpp"
#include "perdure/detail/runs/run_registry.hpp"

namespace perdure::detail {

void runtime_services::run_stopped(const std::string& id,
                                   std::optional<run_outcome> outcome,
                                   std::int64_t epoch) {
  runs->stopped(id, epoch);
  if (outcome)
    queue_item_released(id);
  ends->tell(id, std::move(outcome));
}

bool runtime_services::finish_passivation(const std::string& id,
                                          std::int64_t epoch,
                                          std::uint64_t seen) {
  if (!runs->finish_passivation(id, epoch, seen))
    return false;
  ends->tell(id, std::nullopt); // its waiters poll the store now
  return true;
}

void runtime_services::queue_item_released(const std::string& id) {
  if (queues)
    queues->released(id);
}

void runtime_services::fenced_from(const std::string& id,
                                   std::int64_t epoch) {
  if (runs->fenced_from(id, epoch))
    queue_item_released(id); // its worker starts the next
}

} // namespace perdure::detail
