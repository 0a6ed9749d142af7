#include "perdure/runtime.hpp"

#include "perdure/detail/runtime/ids.hpp"
#include "perdure/detail/runtime/runtime_impl.hpp"

namespace perdure {

// -- runtime --------------------------------------------------------------------

runtime::runtime(config cfg) : client(runtime_mode{}, std::move(cfg)) {
  add_internal_workflows();
}

runtime::~runtime() {
  try {
    stop();
  } catch (const std::exception& ex) {
    impl_->log().error("perdure: {}", ex.what());
  }
}

void runtime::add_workflow(std::string name, detail::workflow_entry entry) {
  detail::check_key("workflow name", name); // its patches are listed after
                                            // it and 0x1E in claim filters
  for (auto& patch : entry.patches)
    detail::check_key("patch id", patch);
  if (impl_->running())
    throw error(errc::invalid_argument,
                "register workflow '" + name + "' before start()");
  if (!impl_->workflows.emplace(name, std::move(entry)).second)
    throw error(errc::invalid_argument,
                "workflow '" + name + "' is already registered");
}

void runtime::start() {
  impl_->start();
}

void runtime::stop() {
  impl_->stop();
}

std::int64_t runtime::left_pending() const {
  return impl_->left_pending();
}

} // namespace perdure
