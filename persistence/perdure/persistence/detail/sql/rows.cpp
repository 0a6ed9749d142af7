#include "perdure/persistence/detail/sql/rows.hpp"

#include "perdure/error.hpp"

namespace perdure::persistence::detail {

const std::string run_columns
  = "id, name, status, inputs, output, error, executor, epoch, "
    "recovery_attempts, app_version, created_at, updated_at, wake_at, "
    "parent_id, deadline, call_chain, saga_phase, cancel_requested_at, "
    "queue_name, priority, partition_key, dedup_id, not_before, started_at, "
    "attempts, object_type, object_key, traceparent, collected_at";

std::string qualified_run_columns(const std::string& t) {
  std::string out;
  std::string_view all{run_columns};
  while (!all.empty()) {
    auto comma = all.find(',');
    auto name = all.substr(0, comma);
    while (!name.empty() && name.front() == ' ')
      name.remove_prefix(1);
    if (!out.empty())
      out += ", ";
    out += t + "." + std::string{name};
    all = comma == std::string_view::npos ? std::string_view{}
                                          : all.substr(comma + 1);
  }
  return out;
}

run_record read_run(const sql_row& row, int first) {
  auto c = [first](int i) { return first + i; };
  run_record r;
  r.id = row.text(c(0));
  r.name = row.text(c(1));
  auto status = parse_run_status(row.text(c(2)));
  if (!status)
    throw perdure::error(errc::store_error,
                         "run " + r.id + " has an unknown status");
  r.status = *status;
  r.inputs = row.bytes(c(3));
  r.output = row.opt_bytes(c(4));
  r.error = row.opt_text(c(5));
  r.owner.executor = row.text(c(6));
  r.owner.epoch = row.int64(c(7));
  r.recovery_attempts = static_cast<std::int32_t>(row.int64(c(8)));
  r.app_version = row.text(c(9));
  r.created_at_ms = row.int64(c(10));
  r.updated_at_ms = row.int64(c(11));
  r.wake_at_ms = row.opt_int64(c(12));
  r.parent_id = row.opt_text(c(13));
  r.deadline_ms = row.opt_int64(c(14));
  r.call_chain = row.opt_text(c(15)).value_or(std::string{});
  r.saga_phase = row.opt_text(c(16)).value_or(std::string{});
  r.cancel_requested = !row.is_null(c(17));
  r.queue_name = row.opt_text(c(18)).value_or(std::string{});
  r.priority = static_cast<std::int32_t>(row.int64(c(19)));
  r.partition_key = row.text(c(20));
  r.dedup_id = row.opt_text(c(21)).value_or(std::string{});
  r.not_before_ms = row.opt_int64(c(22));
  r.started_at_ms = row.opt_int64(c(23));
  r.attempts = static_cast<std::int32_t>(row.int64(c(24)));
  r.object_type = row.opt_text(c(25)).value_or(std::string{});
  r.object_key = row.opt_text(c(26)).value_or(std::string{});
  r.traceparent = row.opt_text(c(27)).value_or(std::string{});
  r.collected_at_ms = row.opt_int64(c(28));
  return r;
}

journal_entry read_entry(const sql_row& row) {
  return read_journal_row(row.text(0), row.int64(1), row.text(2),
                          row.text(3), row.int64(4),
                          row.opt_bytes(5).value_or(std::string{}),
                          row.opt_text(6).value_or(std::string{}),
                          row.int64(7));
}

resolution read_resolution(const sql_row& row) {
  resolution r;
  r.id = row.text(0);
  r.run_id = row.text(1);
  r.seq = static_cast<std::int32_t>(row.int64(2));
  r.result = static_cast<outcome>(row.int64(3));
  r.payload = row.opt_bytes(4).value_or(std::string{});
  r.error = row.opt_text(5).value_or(std::string{});
  r.at_ms = row.int64(6);
  return r;
}

} // namespace perdure::persistence::detail
