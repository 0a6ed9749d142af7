# perdure_add_replay_tests: one ctest case per exported run, checking that
# today's code still replays it (perdure/testing/replay.hpp).
#
#   perdure_add_replay_tests(<target> DIRECTORY <dir> [LABELS <label>...])
#
# <target> is a program of yours whose main() registers the workflows on a
# perdure::testing::replayer and returns `replayer.main(argc, argv)`; each
# `*.json` file under <dir> (runs exported with client::export_run) becomes
# the test `replay.<file name>`, which fails with the first divergence
# (journal index, what the code asks for, what was recorded). Files added
# later are picked up when CMake runs again.
function(perdure_add_replay_tests target)
  cmake_parse_arguments(ARG "" "DIRECTORY" "LABELS" ${ARGN})
  if(NOT ARG_DIRECTORY)
    message(FATAL_ERROR "perdure_add_replay_tests: DIRECTORY is required")
  endif()
  get_filename_component(dir "${ARG_DIRECTORY}" ABSOLUTE)
  file(GLOB exports CONFIGURE_DEPENDS "${dir}/*.json")
  if(NOT exports)
    message(WARNING "perdure_add_replay_tests: no *.json in ${dir}")
  endif()
  foreach(export IN LISTS exports)
    get_filename_component(name "${export}" NAME_WE)
    add_test(NAME replay.${name} COMMAND ${target} ${export})
    set_tests_properties(replay.${name} PROPERTIES
      LABELS "replay;${ARG_LABELS}")
  endforeach()
endfunction()
