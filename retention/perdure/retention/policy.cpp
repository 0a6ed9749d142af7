#include "perdure/retention/policy.hpp"

#include "perdure/error.hpp"

namespace perdure::retention {

const policy* policies::of(std::string_view workflow) const {
  auto it = workflows.find(workflow);
  if (it != workflows.end())
    return &it->second;
  return all ? &*all : nullptr;
}

const keep* keep_of(const policy& p, run_status status) {
  auto of = [](const std::optional<keep>& k) { return k ? &*k : nullptr; };
  switch (status) {
    case run_status::success:
      return of(p.succeeded);
    case run_status::cancelled:
      return of(p.cancelled);
    case run_status::error:
    case run_status::retries_exceeded:
    case run_status::compensated:
    case run_status::compensation_failed:
    case run_status::dead_letter:
      return of(p.failed);
    default:
      return nullptr;
  }
}

void validate(const policies& p) {
  auto check = [](const std::string& which, const policy& x) {
    for (auto* k : {&x.succeeded, &x.failed, &x.cancelled})
      if (*k && (k->value().run.count() < 0 || k->value().tombstone.count() < 0))
        throw error(errc::invalid_argument,
                    "retention policy " + which
                      + ": keep durations cannot be negative (use 0 for "
                        "\"at once\", leave it unset for \"for ever\")");
  };
  if (p.all)
    check("for all workflows", *p.all);
  for (auto& [name, x] : p.workflows)
    check("of '" + name + "'", x);
}

} // namespace perdure::retention
