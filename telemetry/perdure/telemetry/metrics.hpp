#pragma once

// Metrics a process keeps in memory: counters, gauges and histograms in
// labelled families, read as a snapshot (for a team's own registry) or as
// Prometheus text (perdure/telemetry/prometheus.hpp). Recording is a
// relaxed atomic add on a series the caller looked up once; the lookup
// (`family::with`) takes a lock and is meant for set-up, not hot paths.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace perdure::telemetry {

/// A value that only goes up (events, totals).
class counter {
public:
  void add(std::uint64_t n = 1) noexcept {
    value_.fetch_add(n, std::memory_order_relaxed);
  }
  std::uint64_t value() const noexcept {
    return value_.load(std::memory_order_relaxed);
  }

private:
  std::atomic<std::uint64_t> value_{0};
};

/// A value that goes up and down (what is in memory, an age).
class gauge {
public:
  void set(double v) noexcept { value_.store(v, std::memory_order_relaxed); }
  void add(double d) noexcept { value_.fetch_add(d, std::memory_order_relaxed); }
  double value() const noexcept {
    return value_.load(std::memory_order_relaxed);
  }

private:
  std::atomic<double> value_{0};
};

/// Observations counted into buckets by upper bound (inclusive, as
/// Prometheus's `le`), with their count and sum.
class histogram {
public:
  /// `bounds`: ascending upper bounds; `+Inf` is implied.
  explicit histogram(std::span<const double> bounds);

  void observe(double v) noexcept;

  struct reading {
    /// Cumulative counts per bound, then the `+Inf` bucket (= count).
    std::vector<std::uint64_t> cumulative;
    std::uint64_t count = 0;
    double sum = 0;
  };
  reading read() const;
  /// The same into `into`, reusing its memory.
  void read(reading& into) const;
  std::span<const double> bounds() const noexcept { return bounds_; }

private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_; // bounds_ + 1
  std::atomic<double> sum_{0};
};

/// Bucket bounds in seconds for latencies from 100 µs to 60 s.
std::span<const double> latency_buckets();
/// Bucket bounds for sizes (a batch's rows): 1 to 4096, powers of two.
std::span<const double> size_buckets();

enum class metric_type { counter, gauge, histogram };

/// One series of a family as read: its label values (in the family's
/// label order) and its value (histograms fill `buckets`).
struct series_reading {
  std::vector<std::string> label_values;
  double value = 0;
  histogram::reading buckets;
};

/// One family as read.
struct family_reading {
  std::string name;
  std::string help;
  metric_type type = metric_type::counter;
  std::vector<std::string> label_names;
  std::vector<double> bounds; // histograms
  std::vector<series_reading> series;
};

/// Everything a registry holds, families in the order they were added,
/// series in label order.
using snapshot = std::vector<family_reading>;

/// A walk over families and, in each, its series in label order. The
/// snapshot and the Prometheus text are both made by one; the text
/// without copying the series first (a scrape of a thousand workflows).
class series_visitor {
public:
  virtual ~series_visitor() = default;
  /// A family begins: `head` is all of it but its series, which number
  /// `series` and follow.
  virtual void family(const family_reading& head, std::size_t series) = 0;
  /// One series of the family begun last; `buckets` for a histogram, null
  /// otherwise. Both are valid only during the call.
  virtual void series(const std::vector<std::string>& label_values,
                      double value, const histogram::reading* buckets)
    = 0;
};

class family_base {
public:
  virtual ~family_base() = default;
  /// Shows `v` this family, then each of its series.
  virtual void visit(series_visitor& v) const = 0;
  virtual const std::string& name() const noexcept = 0;
  family_reading read() const;
};

/// Series of one metric told apart by label values. Series live as long
/// as the family: references from `with` stay valid.
template <class Metric>
class family final : public family_base {
public:
  family(std::string name, std::string help, std::vector<std::string> labels,
         std::span<const double> bounds = {})
    : name_(std::move(name)),
      help_(std::move(help)),
      labels_(std::move(labels)),
      bounds_(bounds.begin(), bounds.end()) {}

  /// The series for `values` (one per label), made on first use.
  Metric& with(std::vector<std::string> values = {}) {
    values.resize(labels_.size());
    std::lock_guard guard{mtx_};
    auto it = series_.find(values);
    if (it == series_.end())
      it = series_.emplace(std::move(values), make()).first;
    return *it->second;
  }

  void visit(series_visitor& v) const override;
  const std::string& name() const noexcept override { return name_; }

  /// Calls `f(metric)` for every series (to reset gauges, say).
  template <class F>
  void each(F&& f) {
    std::lock_guard guard{mtx_};
    for (auto& [values, metric] : series_)
      f(*metric);
  }

private:
  std::unique_ptr<Metric> make() const {
    if constexpr (std::is_same_v<Metric, histogram>)
      return std::make_unique<histogram>(bounds_);
    else
      return std::make_unique<Metric>();
  }

  std::string name_;
  std::string help_;
  std::vector<std::string> labels_;
  std::vector<double> bounds_;
  mutable std::mutex mtx_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> series_;
};

/// The families of one process (or one runtime). Families are added at
/// set-up and live as long as the registry.
class registry {
public:
  family<counter>& add_counter(std::string name, std::string help,
                               std::vector<std::string> labels = {});
  family<gauge>& add_gauge(std::string name, std::string help,
                           std::vector<std::string> labels = {});
  family<histogram>& add_histogram(std::string name, std::string help,
                                   std::span<const double> bounds,
                                   std::vector<std::string> labels = {});

  /// The counter family `name` if one was added, else a new one (for a
  /// part a process may make more than once: a schedule ticker). Throws
  /// `invalid_argument` if `name` is a family of another type.
  family<counter>& counter_family(std::string name, std::string help,
                                  std::vector<std::string> labels = {});
  family<histogram>& histogram_family(std::string name, std::string help,
                                      std::span<const double> bounds,
                                      std::vector<std::string> labels = {});

  /// Every family's current values.
  snapshot read() const;
  /// Shows `v` every family, in the order they were added.
  void visit(series_visitor& v) const;

private:
  template <class Metric, class... Args>
  family<Metric>& add(Args&&... args);
  /// The family `name` of type `Metric`, or null if there is none.
  template <class Metric>
  family<Metric>* find(std::string_view name) const;

  mutable std::mutex mtx_;
  std::mutex find_or_add_mtx_; // one *_family call at a time
  std::vector<std::unique_ptr<family_base>> families_;
};

} // namespace perdure::telemetry
