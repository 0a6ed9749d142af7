#include "perdure/clock.hpp"

namespace perdure {

namespace {

class system_time final : public clock {
public:
  time_point now() const override {
    return std::chrono::system_clock::now();
  }
};

} // namespace

std::shared_ptr<clock> system_clock() {
  static auto instance = std::make_shared<system_time>();
  return instance;
}

} // namespace perdure
