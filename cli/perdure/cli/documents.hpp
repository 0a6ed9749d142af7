#pragma once

// What operators read, as JSON documents: the CLI's `--json` output and
// the admin endpoint's API are the same documents, built here once.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "perdure/client.hpp"
#include "perdure/queue_stats.hpp"

namespace perdure::cli {

/// A page of `list_runs`: `{"runs": [...], "next_cursor": ...}` (`key`
/// names the list: "calls", "dead_letters").
nlohmann::json run_page_json(const run_page& page, const char* key = "runs");

/// Everything about run `id` (`runs show --json`): `run_json`'s fields,
/// its ownership, payloads, journal (each entry's duration since the one
/// before), children, waits and a saga's undo stack.
nlohmann::json run_document(perdure::client& c, const std::string& id);

/// What a bulk action did or would do.
nlohmann::json bulk_json(const char* action, bool dry_run,
                         const bulk_result& r);

/// A queue's counts and limits.
nlohmann::json queue_json(const queue_stats& s);

/// Every queue with its counts: `{"queues": [...]}`.
nlohmann::json queues_json(perdure::client& c);

/// `{"executors": [...]}` with heartbeat ages and whether each is overdue.
nlohmann::json executors_json(const std::vector<executor_info>& all);

/// Whether a live lease's heartbeat is older than the lease.
bool overdue(const executor_info& e);

/// `{"versions": [...]}`.
nlohmann::json versions_json(const std::vector<version_report>& all);

/// Cancels run `id` (`client::cancel`), and throws `invalid_argument` if
/// it had ended otherwise (nothing was cancelled: an operator must not
/// read "cancelled" then).
void cancel_one(perdure::client& c, const std::string& id);

/// The store's health (`doctor`): `{"ok": ..., "checks": [{"check",
/// "ok", "detail"}]}`.
nlohmann::json doctor_json(perdure::client& c);

} // namespace perdure::cli
