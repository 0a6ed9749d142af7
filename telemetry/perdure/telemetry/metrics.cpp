#include "perdure/telemetry/metrics.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>

namespace perdure::telemetry {

namespace {

constexpr std::array<double, 16> latency_bounds{
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
  0.05,   0.1,     0.25,   0.5,   1,      2.5,   10,    60};

constexpr std::array<double, 13> size_bounds{1,  2,   4,   8,   16,   32,  64,
                                             128, 256, 512, 1024, 2048, 4096};

/// Names as the exposition format allows them: [a-zA-Z_:][a-zA-Z0-9_:]*
/// for metrics, without `:` for labels.
bool valid_name(std::string_view name, bool label) {
  if (name.empty())
    return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
              || (!label && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok)
      return false;
  }
  return true;
}

} // namespace

std::span<const double> latency_buckets() { return latency_bounds; }
std::span<const double> size_buckets() { return size_bounds; }

histogram::histogram(std::span<const double> bounds)
  : bounds_(bounds.begin(), bounds.end()),
    buckets_(std::make_unique<std::atomic<std::uint64_t>[]>(bounds.size()
                                                             + 1)) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end())
      || std::adjacent_find(bounds_.begin(), bounds_.end()) != bounds_.end())
    throw std::invalid_argument("histogram bounds must ascend strictly");
}

void histogram::observe(double v) noexcept {
  auto at = std::lower_bound(bounds_.begin(), bounds_.end(), v)
            - bounds_.begin();
  buckets_[static_cast<std::size_t>(at)].fetch_add(1,
                                                   std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

histogram::reading histogram::read() const {
  reading out;
  read(out);
  return out;
}

void histogram::read(reading& into) const {
  into.cumulative.resize(bounds_.size() + 1);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    into.cumulative[i] = total;
  }
  into.count = total;
  into.sum = sum_.load(std::memory_order_relaxed);
}

namespace {

/// Copies what it is shown into a snapshot.
class snapshot_builder final : public series_visitor {
public:
  void family(const family_reading& head, std::size_t series) override {
    out.push_back(head);
    out.back().series.reserve(series);
  }
  void series(const std::vector<std::string>& label_values, double value,
              const histogram::reading* buckets) override {
    auto& s = out.back().series.emplace_back();
    s.label_values = label_values;
    s.value = value;
    if (buckets)
      s.buckets = *buckets;
  }
  snapshot out;
};

} // namespace

family_reading family_base::read() const {
  snapshot_builder b;
  visit(b);
  return std::move(b.out.front());
}

template <class Metric>
void family<Metric>::visit(series_visitor& v) const {
  family_reading head;
  head.name = name_;
  head.help = help_;
  head.label_names = labels_;
  head.bounds = bounds_;
  if constexpr (std::is_same_v<Metric, counter>)
    head.type = metric_type::counter;
  else if constexpr (std::is_same_v<Metric, gauge>)
    head.type = metric_type::gauge;
  else
    head.type = metric_type::histogram;
  std::lock_guard guard{mtx_};
  v.family(head, series_.size());
  histogram::reading buckets; // one for the family's series
  for (auto& [values, metric] : series_) {
    if constexpr (std::is_same_v<Metric, histogram>) {
      metric->read(buckets);
      v.series(values, static_cast<double>(buckets.count), &buckets);
    } else {
      v.series(values, static_cast<double>(metric->value()), nullptr);
    }
  }
}

template class family<counter>;
template class family<gauge>;
template class family<histogram>;

template <class Metric, class... Args>
family<Metric>& registry::add(Args&&... args) {
  auto f = std::make_unique<family<Metric>>(std::forward<Args>(args)...);
  auto reading = f->read();
  if (!valid_name(reading.name, false))
    throw std::invalid_argument("metric name '" + reading.name
                                + "' is not a Prometheus name");
  for (auto& label : reading.label_names)
    if (!valid_name(label, true) || label == "le")
      throw std::invalid_argument("label name '" + label + "' of "
                                  + reading.name + " is not allowed");
  auto& b = reading.bounds;
  if (!std::is_sorted(b.begin(), b.end())
      || std::adjacent_find(b.begin(), b.end()) != b.end())
    throw std::invalid_argument("the bounds of " + reading.name
                                + " must ascend strictly");
  std::lock_guard guard{mtx_};
  for (auto& known : families_)
    if (known->name() == reading.name)
      throw std::invalid_argument("metric " + reading.name
                                  + " is registered twice");
  auto& out = *f;
  families_.push_back(std::move(f));
  return out;
}

family<counter>& registry::add_counter(std::string name, std::string help,
                                       std::vector<std::string> labels) {
  return add<counter>(std::move(name), std::move(help), std::move(labels));
}

family<gauge>& registry::add_gauge(std::string name, std::string help,
                                   std::vector<std::string> labels) {
  return add<gauge>(std::move(name), std::move(help), std::move(labels));
}

family<histogram>& registry::add_histogram(std::string name, std::string help,
                                           std::span<const double> bounds,
                                           std::vector<std::string> labels) {
  return add<histogram>(std::move(name), std::move(help), std::move(labels),
                        bounds);
}

template <class Metric>
family<Metric>* registry::find(std::string_view name) const {
  std::lock_guard guard{mtx_};
  for (auto& f : families_)
    if (f->name() == name) {
      auto* typed = dynamic_cast<family<Metric>*>(f.get());
      if (!typed)
        throw std::invalid_argument("metric " + std::string{name}
                                    + " is registered with another type");
      return typed;
    }
  return nullptr;
}

family<counter>& registry::counter_family(std::string name, std::string help,
                                          std::vector<std::string> labels) {
  std::lock_guard one{find_or_add_mtx_};
  if (auto* f = find<counter>(name))
    return *f;
  return add_counter(std::move(name), std::move(help), std::move(labels));
}

family<histogram>& registry::histogram_family(std::string name,
                                              std::string help,
                                              std::span<const double> bounds,
                                              std::vector<std::string> labels) {
  std::lock_guard one{find_or_add_mtx_};
  if (auto* f = find<histogram>(name))
    return *f;
  return add_histogram(std::move(name), std::move(help), bounds,
                       std::move(labels));
}

snapshot registry::read() const {
  snapshot_builder b;
  visit(b);
  return std::move(b.out);
}

void registry::visit(series_visitor& v) const {
  std::lock_guard guard{mtx_};
  for (auto& f : families_)
    f->visit(v);
}

} // namespace perdure::telemetry
