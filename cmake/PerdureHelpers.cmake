# Shared compile settings and the helpers every test goes through.

# perdure_set_options(<target>): warnings, -Werror under CI, sanitizers.
function(perdure_set_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-missing-field-initializers)
  if(PERDURE_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(PERDURE_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined
                           -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
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
  set_tests_properties(${test_name} PROPERTIES LABELS "${T_LABELS}"
                       TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${T_ENV}")
endfunction()
