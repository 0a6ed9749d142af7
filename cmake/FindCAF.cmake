# Locates CAF 0.17 as installed by Debian's libcaf-dev, which ships neither a
# CMake package config nor a pkg-config file. Creates CAF::core (and CAF::io
# when asked for) and sets CAF_VERSION from caf/config.hpp.
include(FindPackageHandleStandardArgs)
find_package(Threads REQUIRED)

find_path(CAF_INCLUDE_DIR NAMES caf/config.hpp)
if(CAF_INCLUDE_DIR)
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" _caf_num "${_caf_line}")
  math(EXPR _major "${_caf_num} / 10000")
  math(EXPR _minor "(${_caf_num} / 100) % 100")
  math(EXPR _patch "${_caf_num} % 100")
  set(CAF_VERSION "${_major}.${_minor}.${_patch}")
endif()

if(NOT CAF_FIND_COMPONENTS)
  set(CAF_FIND_COMPONENTS core)
endif()
foreach(_comp IN LISTS CAF_FIND_COMPONENTS)
  find_library(CAF_${_comp}_LIBRARY NAMES caf_${_comp})
  if(CAF_${_comp}_LIBRARY)
    set(CAF_${_comp}_FOUND TRUE)
  endif()
  mark_as_advanced(CAF_${_comp}_LIBRARY)
endforeach()

find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_core_LIBRARY
  VERSION_VAR CAF_VERSION
  HANDLE_COMPONENTS)

foreach(_comp IN LISTS CAF_FIND_COMPONENTS)
  if(CAF_FOUND AND CAF_${_comp}_FOUND AND NOT TARGET CAF::${_comp})
    add_library(CAF::${_comp} UNKNOWN IMPORTED)
    set_target_properties(CAF::${_comp} PROPERTIES
      IMPORTED_LOCATION "${CAF_${_comp}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES Threads::Threads)
  endif()
endforeach()
mark_as_advanced(CAF_INCLUDE_DIR)
