#include "perdure/detail/runtime/admin_store.hpp"

#include <string>

#include "perdure/persistence/detail/migrations.hpp"

namespace perdure::detail {

void admin_store::check_schema(persistence::store& db,
                               const persistence::store_options& opts) {
  auto latest = persistence::detail::sqlite_migrations().back().version;
  int found = 0;
  std::string why;
  try {
    found = db.schema_version();
  } catch (const perdure::error& ex) {
    if (ex.code() == errc::store_unavailable)
      throw;
    // Most often no schema_migrations table: no Perdure schema here (or a
    // role that may not read it: the reason says which).
    why = std::string{" (reading its version failed: "} + ex.what() + ")";
  }
  // Newer is fine: migrations only add (a rolling deploy's new code
  // migrated while this older code still runs).
  if (found >= latest)
    return;
  auto where = opts.url.rfind("sqlite://", 0) == 0
                 ? opts.url
                 : "schema '" + opts.schema + "'";
  if (found == 0)
    throw perdure::error(errc::invalid_argument,
                         "no Perdure schema in " + where + why
                           + ": start a runtime there once, or run "
                             "`perdure migrate` (migrate_schema is off)");
  throw perdure::error(
      errc::invalid_argument,
      "the Perdure schema in " + where + " is at version "
        + std::to_string(found) + ", this code needs "
        + std::to_string(latest)
        + ": run `perdure migrate` (or start a runtime of this version, "
          "which migrates) first");
}

} // namespace perdure::detail
