#pragma once

// The replay check: does the code about to be deployed still replay the
// journals of runs in flight? Export runs (`client::export_run`), then
// replay each against the new code here, with no database and no side
// effects: recorded operations are taken from the export, and the check
// stops where the code would run something new.
//
// ~~~
// perdure::testing::replayer r;
// r.register_workflow("checkout", checkout, {.patches = {"new-tax"}});
// auto report = r.replay(exported_json);
// EXPECT_TRUE(report.ok()) << report.summary;
// ~~~
//
// `replayer::main` makes a CI program of it, and the CMake function
// `perdure_add_replay_tests` one ctest case per exported file.

#include <cstdint>
#include <map>
#include <string>

#include "perdure/detail/workflow_entry.hpp"
#include "perdure/runtime.hpp"

namespace perdure::testing {

/// What a replay found.
struct replay_report {
  enum class verdict : std::uint8_t {
    /// The code replayed every recorded operation it reached.
    replays,
    /// The code asks for another operation than the journal recorded, or
    /// ended before what the journal recorded after.
    diverges,
    /// The export cannot be checked: unknown workflow, bad rows.
    unusable,
  };
  verdict result = verdict::replays;
  /// The journal index of the first divergence (-1: none).
  std::int32_t index = -1;
  /// There: what the code asks for, and what the journal recorded (e.g.
  /// `step 'charge'`; `nothing` when one side has no operation).
  std::string expected, recorded;
  /// Recorded operations the code replayed before it stopped.
  std::int32_t replayed = 0;
  /// One line for a person: what was checked and what was found.
  std::string summary;

  bool ok() const noexcept {
    return result == verdict::replays;
  }
};

/// Holds the workflows to check, registered as a runtime registers them.
class replayer {
public:
  /// Registers workflow `name` (as `runtime::register_workflow`).
  template <class F>
  void register_workflow(std::string name, F fn, workflow_options opts = {}) {
    auto entry = detail::make_workflow_entry(std::move(fn));
    entry.patches = std::move(opts.patches);
    workflows_[std::move(name)] = std::move(entry);
  }

  /// Replays the exported run `exported` (JSON, `client::export_run`) on
  /// the workflow it names.
  replay_report replay(const std::string& exported) const;

  /// `replay` of the file at `path`.
  replay_report replay_file(const std::string& path) const;

  /// For a CI program: replays every file named on the command line,
  /// prints a line per file, and returns 0 if every one replays, 1 if not
  /// (2 without files).
  int main(int argc, char** argv) const;

private:
  std::map<std::string, detail::workflow_entry, std::less<>> workflows_;
};

/// Replays the exported run `exported` on `workflow` (registered under
/// the name the export carries).
template <class F>
replay_report replay(const std::string& exported, F workflow,
                     workflow_options opts = {}) {
  replayer r;
  r.register_workflow(std::string{}, std::move(workflow), std::move(opts));
  return r.replay(exported);
}

} // namespace perdure::testing
