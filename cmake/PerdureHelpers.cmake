# Shared compile settings and the helpers every test goes through.

# perdure_set_options(<target>): warnings, -Werror under CI, sanitizers.
function(perdure_set_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-missing-field-initializers)
  if(PERDURE_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(PERDURE_SANITIZE)
    # Recoverable UBSan, so tools/ubsan.supp can silence CAF's one benign
    # report; halt_on_error=1 (set per test) still stops at anything else.
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined
                           -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# perdure_add_test_binary(<name> SOURCES <...> [LIBS <...>])
function(perdure_add_test_binary name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE perdure::perdure GTest::gtest ${T_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  perdure_set_options(${name})
endfunction()

# perdure_register_test(<test-name> BINARY <bin> LABELS <...> [ENV <...>]
#                       [ARGS <...>] [TIMEOUT <s>])
function(perdure_register_test test_name)
  cmake_parse_arguments(T "" "BINARY;TIMEOUT" "LABELS;ENV;ARGS" ${ARGN})
  add_test(NAME ${test_name} COMMAND ${T_BINARY} ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(PERDURE_SANITIZE)
    list(APPEND T_ENV
      "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=${PROJECT_SOURCE_DIR}/tools/ubsan.supp"
      "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1"
      "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tools/lsan.supp")
  endif()
  set_tests_properties(${test_name} PROPERTIES LABELS "${T_LABELS}"
                       TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${T_ENV}")
endfunction()

# perdure_check_headers(<target>): compiles every header below the current
# folder's `perdure/` on its own, so none relies on what its includer
# happened to include first.
function(perdure_check_headers target)
  if(NOT PERDURE_CHECK_HEADERS)
    return()
  endif()
  file(GLOB_RECURSE headers RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}
       ${CMAKE_CURRENT_SOURCE_DIR}/perdure/*.hpp)
  set(sources "")
  foreach(header IN LISTS headers)
    string(MAKE_C_IDENTIFIER ${header} name)
    set(source ${CMAKE_CURRENT_BINARY_DIR}/header_check/${name}.cpp)
    file(WRITE ${source}.in "#include \"${header}\"\n")
    configure_file(${source}.in ${source} COPYONLY)
    list(APPEND sources ${source})
  endforeach()
  add_library(${target}_header_check OBJECT ${sources})
  target_link_libraries(${target}_header_check PRIVATE ${target} CAF::core)
  perdure_set_options(${target}_header_check)
endfunction()
