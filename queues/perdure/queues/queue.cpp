#include "perdure/queues/queue.hpp"

#include "perdure/detail/runtime/ids.hpp"
#include "perdure/detail/runtime/client_access.hpp"
#include "perdure/detail/timer/clock.hpp"
#include "perdure/detail/runtime/client_gate.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/detail/runs/collected.hpp"
#include "perdure/detail/tracing/run_trace.hpp"
#include "perdure/persistence/detail/channel.hpp"
#include "perdure/persistence/notice.hpp"
#include "perdure/queues/detail/runtime/queue_service.hpp"

#include <limits>

namespace perdure::queues {

namespace {

/// Delays and timeouts from here on mean "never" (10 000 years: far past
/// any real deadline, and a start time plus it still fits in 64 bits).
constexpr std::chrono::milliseconds never{std::int64_t{10'000} * 365 * 24
                                          * 3600 * 1000};

using perdure::detail::client_access;
using perdure::detail::client_gate;

void check_options(const std::string& name, const queue_options& o) {
  auto bad = [&](const char* what) {
    throw perdure::error(errc::invalid_argument,
                         "queue '" + name + "': " + what);
  };
  if (o.worker_concurrency < 1)
    bad("worker_concurrency must be at least 1");
  if (o.concurrency && *o.concurrency < 1)
    bad("concurrency must be at least 1");
  if (o.partition_concurrency && *o.partition_concurrency < 1)
    bad("partition_concurrency must be at least 1");
  if (o.rate && (o.rate->limit < 1 || o.rate->period.count() < 1))
    bad("a rate limit needs a limit and a period of at least 1");
  if (o.retry.max_attempts < 1 || o.retry.backoff.count() < 0
      || o.retry.factor < 1.0)
    bad("retry needs max_attempts >= 1, backoff >= 0 and factor >= 1");
  if (o.poll_interval.count() < 1)
    bad("poll_interval must be positive");
}

/// Throws unless `existing`, found under `item`'s id, is the same enqueue.
void check_same(const persistence::run_record& existing,
                const persistence::run_record& item) {
  if (existing.id != item.id)
    return; // the dedup id's holder: returned as it is
  // A tombstone's inputs are gone (retention): not compared.
  if (existing.name != item.name || existing.queue_name != item.queue_name
      || (existing.inputs != item.inputs && !existing.collected_at_ms))
    throw perdure::error(errc::conflicting_id,
                         "workflow id '" + item.id
                           + "' already names another run");
}

persistence::run_record make_item(const config& cfg, std::string_view queue,
                                  std::string_view workflow,
                                  std::string inputs, enqueue_options& opts) {
  perdure::detail::check_name("queue name", queue);
  perdure::detail::check_name("workflow name", workflow);
  if (opts.id.empty())
    opts.id = perdure::detail::random_id();
  perdure::detail::check_name("workflow id", opts.id);
  if (!opts.dedup_id.empty())
    perdure::detail::check_name("dedup id", opts.dedup_id);
  if (opts.partition_key.size() > 255)
    throw perdure::error(errc::invalid_argument,
                         "partition key longer than 255 bytes");
  if (opts.delay.count() < 0 || opts.timeout.count() < 0)
    throw perdure::error(errc::invalid_argument,
                         "delay and timeout cannot be negative");
  if (inputs.size() > cfg.max_payload_bytes)
    throw perdure::error(errc::payload_too_large,
                         "inputs of " + std::to_string(inputs.size())
                           + " bytes exceed the limit of "
                           + std::to_string(cfg.max_payload_bytes));
  auto now = perdure::detail::now_ms();
  persistence::run_record item;
  item.id = opts.id;
  item.name = std::string{workflow};
  item.status = run_status::enqueued;
  item.inputs = std::move(inputs);
  item.owner = {persistence::unowned_executor, 0};
  item.app_version = cfg.app_version;
  item.created_at_ms = now;
  // Huge values saturate: a timeout too long to reach is none, a delay
  // too long to reach waits for ever (never a wrapped-around time, nor a
  // deadline the stores cannot add to a start time).
  if (opts.timeout.count() > 0 && opts.timeout < never)
    item.timeout_ms = opts.timeout.count();
  item.queue_name = std::string{queue};
  item.priority = opts.priority;
  item.partition_key = opts.partition_key;
  item.dedup_id = opts.dedup_id;
  item.traceparent = perdure::detail::traceparent_for_start(opts.traceparent);
  if (opts.delay.count() > 0)
    item.not_before_ms = opts.delay < never
                           ? now + opts.delay.count()
                           : std::numeric_limits<std::int64_t>::max();
  return item;
}

} // namespace

void register_queue(runtime& rt, std::string name, queue_options opts) {
  perdure::detail::check_name("queue name", name);
  check_options(name, opts);
  auto& svc = client_access::services(rt);
  if (svc.runs->running())
    throw perdure::error(errc::invalid_argument,
                         "register queue '" + name + "' before start()");
  if (!svc.queues)
    client_access::set_queue_hooks(
      rt, std::make_shared<detail::queue_service>(svc));
  static_cast<detail::queue_service&>(*svc.queues)
    .add(std::move(name), std::move(opts));
}

std::string detail::enqueue_bytes(client& c, std::string_view queue,
                                  std::string_view workflow,
                                  std::string inputs, enqueue_options opts) {
  auto& rt = client_access::services(c);
  if (!rt.runs->running())
    throw perdure::error(errc::not_running,
                         "start() the runtime before enqueueing");
  if (!rt.client_mode && rt.workflows.count(std::string{workflow}) == 0)
    throw perdure::error(errc::unknown_workflow,
                         "no workflow registered as '" + std::string{workflow}
                           + "'");
  auto item = make_item(rt.cfg, queue, workflow, std::move(inputs), opts);
  client_gate::call call{*rt.gate};
  auto result = rt.stores->with(
    [&](persistence::store& db) { return db.enqueue(item); });
  if (!result.created) {
    check_same(result.run, item);
    return result.run.id;
  }
  if (rt.queues) // registered here: no need to wait for the notice
    rt.queues->notice(item.queue_name);
  return item.id;
}

std::string detail::stage_bytes(sql_session& tx, std::string_view queue,
                                std::string_view workflow, std::string inputs,
                                enqueue_options opts) {
  config cfg; // limits and encoding of the defaults
  auto item = make_item(cfg, queue, workflow, std::move(inputs), opts);
  auto pg = std::string_view{tx.dialect()} == "postgresql";
  auto schema = tx.perdure_schema();
  if (pg && schema.empty())
    schema = config{}.schema; // a session that does not say: the default
  std::string quoted = "\"";
  for (char ch : schema)
    quoted += ch == '"' ? std::string{"\"\""} : std::string{ch};
  quoted += "\".";
  auto table = [&](const char* name) {
    return pg ? quoted + name : std::string{name};
  };
  static constexpr char hex[] = "0123456789abcdef";
  std::string bytes;
  if (pg) {
    for (unsigned char ch : item.inputs) {
      bytes += hex[ch >> 4];
      bytes += hex[ch & 15];
    }
  } else {
    bytes = item.inputs;
  }
  auto opt = [](const std::optional<std::int64_t>& x) -> sql_param {
    if (x)
      return *x;
    return nullptr;
  };
  auto inserted = tx.exec(
    "INSERT INTO " + table("runs")
      + " (id, name, status, inputs, executor, epoch, app_version, "
        "created_at, updated_at, timeout_ms, queue_name, priority, "
        "partition_key, dedup_id, not_before, traceparent"
      + (pg ? ", inbox_seq" : "") + ") VALUES ($1, $2, 'ENQUEUED', "
      + (pg ? "decode($3, 'hex')" : "CAST($3 AS BLOB)")
      + ", '', 0, '', $4, $4, $5, $6, $7, $8, $9, $10, $11"
      + (pg ? ", nextval('" + quoted + "inbox_seq')" : std::string{})
      + ") ON CONFLICT DO NOTHING RETURNING id",
    {item.id, item.name, bytes, item.created_at_ms, opt(item.timeout_ms),
     item.queue_name, std::int64_t{item.priority}, item.partition_key,
     item.dedup_id.empty() ? sql_param{nullptr} : sql_param{item.dedup_id},
     opt(item.not_before_ms),
     item.traceparent.empty() ? sql_param{nullptr}
                              : sql_param{item.traceparent}});
  if (inserted.rows.empty()) {
    // Taken: this id again, or the dedup id's holder.
    auto found = tx.exec("SELECT id, name, queue_name FROM " + table("runs")
                           + " WHERE id = $1",
                         {item.id});
    if (!found.rows.empty()) {
      if (found.rows[0][1] != item.name || found.rows[0][2] != item.queue_name)
        throw perdure::error(errc::conflicting_id,
                             "workflow id '" + item.id
                               + "' already names another run");
      return item.id;
    }
    auto holder = tx.exec("SELECT id FROM " + table("runs")
                            + " WHERE queue_name = $1 AND dedup_id = $2 AND "
                              "status IN ('ENQUEUED', 'PENDING')",
                          {item.queue_name, item.dedup_id});
    if (holder.rows.empty() || !holder.rows[0][0])
      throw perdure::error(errc::store_error,
                           "enqueue of '" + item.id + "' conflicted with "
                             "nothing");
    return *holder.rows[0][0];
  }
  // Announced when (and if) the transaction commits.
  if (pg)
    tx.exec("SELECT pg_notify($1, $2)",
            {persistence::detail::delivery_channel(schema),
             persistence::notice::queued(item.queue_name).encode()});
  else
    tx.exec("INSERT INTO notices (payload, created_at) VALUES ($1, $2)",
            {persistence::notice::queued(item.queue_name).encode(),
             item.created_at_ms});
  return item.id;
}

queue_stats stats(client& c, std::string_view queue) {
  auto& rt = client_access::services(c);
  if (!rt.runs->running())
    throw perdure::error(errc::not_running, "the runtime is not running");
  perdure::detail::check_name("queue name", queue);
  client_gate::call call{*rt.gate};
  return rt.stores->with([&](persistence::store& db) {
    return db.count_queue(queue, perdure::detail::now_ms());
  });
}

void requeue(client& c, const std::string& id) {
  auto& rt = client_access::services(c);
  if (!rt.runs->running())
    throw perdure::error(errc::not_running, "the runtime is not running");
  client_gate::call call{*rt.gate};
  auto item = rt.stores->with([&](persistence::store& db) {
    return db.requeue(id, perdure::detail::now_ms(), {});
  });
  if (!item) {
    auto run = rt.stores->with(
      [&](persistence::store& db) { return db.get_run(id); });
    if (run)
      perdure::detail::throw_if_collected(*run);
    throw perdure::error(errc::not_found,
                         "'" + id + "' is not a dead-lettered queue item");
  }
  if (rt.queues)
    rt.queues->notice(item->queue_name);
}

} // namespace perdure::queues
