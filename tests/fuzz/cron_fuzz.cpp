// libFuzzer target for the cron parser (clang only: configure with
// -DCMAKE_CXX_COMPILER=clang++ -DPERDURE_LIBFUZZER=ON, then run
// build/tests/perdure-cron-fuzz -max_total_time=60).

#include <cstddef>
#include <cstdint>
#include <string>

#include "schedules/cron_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size > 256)
    return 0;
  perdure::schedules::test::check_cron_text(
    std::string{reinterpret_cast<const char*>(data), size});
  return 0;
}
