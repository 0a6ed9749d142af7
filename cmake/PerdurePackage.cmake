# Install and export rules: find_package(perdure CONFIG REQUIRED) and
# target_link_libraries(app PRIVATE perdure::perdure) from another project,
# against an installed tree or this build tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PERDURE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/perdure)

install(TARGETS perdure_telemetry perdure_persistence perdure_actors perdure perdure_sagas
                perdure_queues perdure_schedules perdure_retention
        EXPORT perdureTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/telemetry/perdure
                  ${PROJECT_SOURCE_DIR}/persistence/perdure
                  ${PROJECT_SOURCE_DIR}/actors/perdure
                  ${PROJECT_SOURCE_DIR}/sagas/perdure
                  ${PROJECT_SOURCE_DIR}/queues/perdure
                  ${PROJECT_SOURCE_DIR}/schedules/perdure
                  ${PROJECT_SOURCE_DIR}/retention/perdure
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp"
        # Concept folders under detail/ are machinery: no public header
        # reaches them (top-level detail/ headers support the public ones).
        REGEX "/detail/[^/.]+$" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/generated/perdure/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/perdure)
install(EXPORT perdureTargets NAMESPACE perdure::
        DESTINATION ${PERDURE_CMAKE_DIR})
export(EXPORT perdureTargets NAMESPACE perdure::
       FILE ${PROJECT_BINARY_DIR}/perdureTargets.cmake)

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/perdureConfig.cmake.in
  ${PROJECT_BINARY_DIR}/perdureConfig.cmake
  INSTALL_DESTINATION ${PERDURE_CMAKE_DIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/perdureConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
# The build tree is a package too (CMAKE_PREFIX_PATH=<build dir>).
configure_file(${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
               ${PROJECT_BINARY_DIR}/FindCAF.cmake COPYONLY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/PerdureReplay.cmake
               ${PROJECT_BINARY_DIR}/PerdureReplay.cmake COPYONLY)
install(FILES ${PROJECT_BINARY_DIR}/perdureConfig.cmake
              ${PROJECT_BINARY_DIR}/perdureConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
              ${PROJECT_SOURCE_DIR}/cmake/PerdureReplay.cmake
        DESTINATION ${PERDURE_CMAKE_DIR})

# perdure::admin, the endpoint an application constructs, with the static
# libraries it is made of (the CLI's documents, the console's files).
if(TARGET perdure_admin)
  install(TARGETS perdure_admin perdure_console perdure_cli
          EXPORT perdureAdminTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/admin/perdure/admin/endpoint.hpp
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/perdure/admin)
  install(EXPORT perdureAdminTargets NAMESPACE perdure::
          DESTINATION ${PERDURE_CMAKE_DIR})
  export(EXPORT perdureAdminTargets NAMESPACE perdure::
         FILE ${PROJECT_BINARY_DIR}/perdureAdminTargets.cmake)
endif()

# The operator's command-line tool, as `perdure` on the PATH.
if(TARGET perdure-cli)
  install(TARGETS perdure-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
