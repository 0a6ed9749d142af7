#include "perdure/detail/tracing/run_trace.hpp"

#include <mutex>
#include <unordered_map>
#include <utility>

#include "perdure/error.hpp"
#include "perdure/persistence/records.hpp"

namespace perdure::detail {

namespace {

thread_local std::optional<telemetry::span_context> running_in;

std::string activation_key(const std::string& run, std::int64_t epoch,
                           std::int64_t activation) {
  auto key = run + "\x1f" + std::to_string(epoch);
  if (activation > 0)
    key += "\x1f" + std::to_string(activation);
  return key;
}

telemetry::span_id attempt_id(const std::string& run, std::int64_t epoch,
                              std::int64_t activation) {
  return telemetry::derived_span_id(activation_key(run, epoch, activation));
}

/// Per run, the epoch it was last activated at here and how many times.
struct activations {
  std::mutex mtx;
  std::unordered_map<std::string, std::pair<std::int64_t, std::int64_t>> of;

  std::int64_t next(const std::string& run, std::int64_t epoch) {
    std::lock_guard guard{mtx};
    auto [it, fresh] = of.try_emplace(run, epoch, 0);
    if (fresh || it->second.first != epoch) {
      it->second = {epoch, 0};
      return 0;
    }
    return ++it->second.second;
  }
};

activations& counted() {
  static activations a;
  return a;
}

} // namespace

run_trace::run_trace(const persistence::run_record& run, bool reporting)
  : run_id_(run.id), epoch_(run.owner.epoch), start_ns_(telemetry::now_ns()),
    reporting_(reporting) {
  auto from = telemetry::span_context::parse(run.traceparent);
  if (from) {
    attempt_.trace = from->trace;
    attempt_.flags = from->flags;
    parent_ = from->span;
  } else {
    attempt_.trace = telemetry::derived_trace_id(run.id);
  }
  if (reporting_)
    activation_ = counted().next(run.id, epoch_);
  attempt_.span = attempt_id(run.id, epoch_, activation_);
  // A woken run links to its activation before passivation; a run that had
  // an attempt cut short (a crash, a takeover) to the first activation at
  // the epoch before (a claim moves the epoch on by one).
  if (activation_ > 0)
    previous_ = telemetry::span_context{
      attempt_.trace, attempt_id(run.id, epoch_, activation_ - 1),
      attempt_.flags};
  else if (run.recovery_attempts > 0 && epoch_ > 0)
    previous_ = telemetry::span_context{attempt_.trace,
                                        attempt_id(run.id, epoch_ - 1, 0),
                                        attempt_.flags};
}

telemetry::span_context run_trace::operation(std::int32_t seq) const noexcept {
  // splitmix64's finaliser over the attempt's span and the index: distinct
  // per operation of an attempt, and no string built per step.
  std::uint64_t x = 0;
  for (auto b : attempt_.span)
    x = (x << 8) | b;
  x += 0x9e3779b97f4a7c15ULL * (static_cast<std::uint64_t>(seq) + 1);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  if (x == 0)
    x = 1; // an all-zero span id is invalid
  telemetry::span_id id{};
  for (int i = 7; i >= 0; --i, x >>= 8)
    id[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(x);
  return {attempt_.trace, id, attempt_.flags};
}

void run_trace::forget() const {
  if (reporting_)
    forget(run_id_);
}

void run_trace::forget(const std::string& run_id) {
  auto& a = counted();
  std::lock_guard guard{a.mtx};
  a.of.erase(run_id);
}

telemetry::span
run_trace::attempt_span(std::string name,
                        std::vector<telemetry::attribute> attributes,
                        std::optional<std::string> error) const {
  telemetry::span s;
  s.context = attempt_;
  s.parent = parent_;
  s.name = std::move(name);
  s.kind = telemetry::span_kind::consumer; // the run's work, as it was queued
  s.start_ns = start_ns_;
  s.end_ns = telemetry::now_ns();
  s.attributes = std::move(attributes);
  if (previous_)
    s.links.push_back({*previous_,
                       {{"perdure.link", std::string{activation_ > 0
                                                       ? "previous_activation"
                                                       : "previous_attempt"}}}});
  s.error = std::move(error);
  return s;
}

telemetry::span
run_trace::operation_span(std::int32_t seq, std::string name,
                          std::int64_t start_ns,
                          std::vector<telemetry::attribute> attributes,
                          std::optional<std::string> error) const {
  telemetry::span s;
  s.context = operation(seq);
  s.parent = attempt_.span;
  s.name = std::move(name);
  s.start_ns = start_ns;
  s.end_ns = telemetry::now_ns();
  s.attributes = std::move(attributes);
  s.error = std::move(error);
  return s;
}

std::optional<telemetry::span_context> current_span() {
  return running_in;
}

current_span_scope::current_span_scope(const telemetry::span_context& c)
  : saved_(running_in) {
  running_in = c;
}

current_span_scope::~current_span_scope() {
  running_in = saved_;
}

std::string traceparent_for_start(std::string_view given) {
  if (!given.empty()) {
    auto c = telemetry::span_context::parse(given);
    if (!c)
      throw perdure::error(errc::invalid_argument,
                           "traceparent '" + std::string{given}
                             + "' is not a W3C trace context (expected "
                               "00-<32 hex>-<16 hex>-<2 hex>, lower case)");
    return c->traceparent();
  }
  if (auto c = current_span())
    return c->traceparent();
  return {};
}

} // namespace perdure::detail
