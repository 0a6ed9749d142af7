#pragma once

// The claim filter as SQL, once for both dialects: which runs (and queue
// items) a process may claim. Every claim path uses it, so the rule (its
// workflows, its app version, the patches it declares; no invocations) is
// written in one place per dialect.

#include <string>

#include "perdure/persistence/detail/pg_array.hpp"
#include "perdure/persistence/detail/sql/pg_text.hpp"
#include "perdure/persistence/detail/sql/sql_tx.hpp"
#include "perdure/persistence/records.hpp"

namespace perdure::persistence::detail {

/// Runs the claim filter admits, the runs table named `runs` in the
/// statement: `names` (a parameter) as `claim_names` makes it for `d`,
/// `version` the app version's parameter.
inline std::string claimable(sql_dialect d, const std::string& names = "$2",
                             const std::string& version = "$3") {
  if (d == sql_dialect::postgresql)
    return claimable(names, version);
  // A list of names each followed by a unit separator (SQLite has no
  // arrays): `instr` finds one, a patch as workflow, '\x1e', patch.
  return "instr(" + names + ", char(31) || runs.name || char(31)) > 0 AND "
         "(runs.app_version = '' OR runs.app_version = " + version
         + ") AND runs.object_type IS NULL AND NOT EXISTS (SELECT 1 FROM "
           "journal pj WHERE pj.run_id = runs.id AND pj.seq < 0 AND pj.kind "
           "= 'patch' AND instr(" + names + ", char(31) || runs.name || "
           "char(30) || pj.name || char(31)) = 0)";
}

/// The names of `f` as `claimable`'s `names` parameter on `d`.
inline std::string claim_names(const claim_filter& f, sql_dialect d) {
  if (d == sql_dialect::postgresql) {
    pg_array names;
    for (auto& n : f.names)
      names.add(n);
    return names.str();
  }
  std::string names{'\x1f'};
  for (auto& n : f.names)
    names += n + '\x1f';
  return names;
}

} // namespace perdure::persistence::detail
