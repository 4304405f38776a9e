# One helper each for tests, examples and benchmarks.

# Test code is compiled at -O1 whatever the build type: it drives the libraries, which keep their
# -O3, and compiles in about half the time (the tests are most of the project's translation units).
function(coserve_test_optimization target)
  target_compile_options(${target} PRIVATE $<$<CONFIG:Release,RelWithDebInfo>:-O1>)
endfunction()

# The Catch2 v2 main (tests/catch_main.cpp), compiled once and shared by every test executable.
if(COSERVE_BUILD_TESTS AND NOT TARGET coserve_catch_main)
  add_library(coserve_catch_main OBJECT ${PROJECT_SOURCE_DIR}/tests/catch_main.cpp)
  target_include_directories(coserve_catch_main PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(coserve_catch_main PUBLIC Catch2::Catch2)
  coserve_test_optimization(coserve_catch_main)
  # Under ASan the test runner itself (Catch2's main) is left out of the instrumentation; the test
  # cases, where the assertions expand, keep it. Not under TSan: an inline function the linker
  # takes from an uninstrumented file (shared_ptr's release, say) hides its synchronisation from
  # TSan everywhere, which then reports races that are not there.
  if(COSERVE_SANITIZE STREQUAL "address" OR COSERVE_FUZZ)
    target_compile_options(coserve_catch_main PRIVATE -fno-sanitize=all)
  endif()
endif()

# coserve_add_test(NAME SOURCES a.cpp ... [LIBS lib ...] [LABELS l ...])
# One Catch2 executable; each TEST_CASE becomes a ctest test carrying the labels. Tests run with the
# project root as working directory so ../shared/testdata resolves. A test case that skips
# (COSERVE_SKIP, tests/skip.hpp) exits with 77, which ctest reports as skipped.
function(coserve_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES} $<TARGET_OBJECTS:coserve_catch_main>)
  target_link_libraries(${name} PRIVATE Catch2::Catch2 coserve_warnings ${T_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})  # "tests/skip.hpp"
  coserve_test_optimization(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_definitions(${name} PRIVATE COSERVE_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                                             COSERVE_BINARY_DIR="${CMAKE_BINARY_DIR}")
  # Catch's test discovery cannot carry a list of labels (it splits them into bogus properties),
  # so the labels are joined into one, e.g. "runtime-concurrency". `ctest -L` takes a regular
  # expression, so `-L concurrency` and `-L runtime` both select such a test.
  string(REPLACE ";" "-" label "${T_LABELS}")
  # ctest splits a discovered test's name at ';' (it becomes two tests that both fail): refuse
  # such names here, in the first or a continued string literal of a TEST_CASE.
  foreach(src IN LISTS T_SOURCES)
    get_filename_component(path "${src}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(NOT EXISTS "${path}")
      continue()
    endif()
    file(READ "${path}" text)
    if(text MATCHES "TEST_CASE\\(\"[^\"]*;" OR text MATCHES "TEST_CASE\\(\"[^\"]*\"[ \n]*\"[^\"]*;")
      message(FATAL_ERROR "${src}: a TEST_CASE name contains ';', which ctest splits into two tests")
    endif()
  endforeach()
  catch_discover_tests(${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                       PROPERTIES LABELS "${label}" SKIP_RETURN_CODE 77)
endfunction()

# coserve_add_example(NAME SOURCES a.cpp ... [LIBS lib ...])
function(coserve_add_example name)
  cmake_parse_arguments(E "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${E_SOURCES})
  target_link_libraries(${name} PRIVATE coserve_warnings ${E_LIBS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/examples)
endfunction()

# coserve_add_benchmark(NAME SOURCES a.cpp ... [LIBS lib ...]) - built, never run by ctest.
function(coserve_add_benchmark name)
  cmake_parse_arguments(B "" "" "SOURCES;LIBS" ${ARGN})
  if(NOT COSERVE_BUILD_BENCH)
    return()
  endif()
  add_executable(${name} ${B_SOURCES})
  target_link_libraries(${name} PRIVATE coserve_warnings ${B_LIBS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endfunction()

# coserve_check_headers(LIB lib DIRS dir... [EXCLUDE dir...])
# Every public header (*.hpp) under DIRS (but EXCLUDE) compiled on its own, included twice (so its
# include guard is checked too), each as one translation unit of an OBJECT library linked to LIB for
# its include paths and definitions. All of them together are the target `coserve_headers`, which
# is not part of the default build; CI builds it.
if(NOT TARGET coserve_headers)
  add_custom_target(coserve_headers)
endif()
function(coserve_check_headers)
  cmake_parse_arguments(H "" "LIB" "DIRS;EXCLUDE" ${ARGN})
  set(sources)
  foreach(dir IN LISTS H_DIRS)
    file(GLOB_RECURSE headers RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
         ${PROJECT_SOURCE_DIR}/${dir}/*.hpp)
    foreach(header IN LISTS headers)
      set(skip FALSE)
      foreach(ex IN LISTS H_EXCLUDE)
        string(FIND "${header}" "${ex}/" at)
        if(at EQUAL 0)
          set(skip TRUE)
        endif()
      endforeach()
      if(skip)
        continue()
      endif()
      set(src ${CMAKE_BINARY_DIR}/header_check/${header}.cpp)
      file(CONFIGURE OUTPUT ${src} CONTENT "#include \"${header}\"\n#include \"${header}\"\n")
      list(APPEND sources ${src})
    endforeach()
  endforeach()
  if(NOT sources)
    return()
  endif()
  set(target coserve_headers_${H_LIB})
  add_library(${target} OBJECT EXCLUDE_FROM_ALL ${sources})
  target_link_libraries(${target} PRIVATE ${H_LIB} coserve_warnings)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
  set_source_files_properties(${sources} PROPERTIES COMPILE_OPTIONS "-O0;-g0")
  add_dependencies(coserve_headers ${target})
endfunction()
