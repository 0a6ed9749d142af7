#pragma once

#include <string>
#include <utility>
#include <vector>

#include "perdure/detail/object_entry.hpp"

namespace perdure {

/// How a handler is registered (`object_builder::handler`).
struct handler_options {
  /// The patches its code asks about (`patched`, `deprecated_patch`), as
  /// `workflow_options::patches`: a `patched` of a patch not listed throws.
  std::vector<std::string> patches;
};

/// Adds handlers to a virtual object type (see `runtime::register_object`).
template <class State>
class object_builder {
public:
  explicit object_builder(detail::object_entry& entry) : entry_(&entry) {
  }

  /// Registers `fn` under `name`: a coroutine `task<R>(object_context<State>&,
  /// A)` or `task<R>(object_context<State>&)` (exclusive: one at a time per
  /// key; it may change the state), or the same taking a
  /// `shared_object_context<State>&` (shared: read-only, concurrent).
  template <class F>
  object_builder& handler(std::string name, F fn, handler_options opts = {}) {
    auto entry = detail::make_handler_entry<State>(std::move(fn));
    entry.patches = std::move(opts.patches);
    entry_->handlers[std::move(name)] = std::move(entry);
    return *this;
  }

private:
  detail::object_entry* entry_;
};

} // namespace perdure
