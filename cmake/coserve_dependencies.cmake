# Third-party dependencies, all from Debian packages (scripts/deps installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)

# Standalone Asio (header-only). Coroutines need no extra flag with GCC >= 11 in C++20 mode.
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(coserve_asio INTERFACE)
target_include_directories(coserve_asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
target_compile_definitions(coserve_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
# Asio decides between std::aligned_alloc/free and operator new/delete for its recycled handler
# memory by _GLIBCXX_HAVE_ALIGNED_ALLOC, which is defined only once a standard header has been
# included: a file whose first include is an Asio header would compile the other pair, and the
# inline functions of two files then disagree (ASan: alloc-dealloc-mismatch). Every supported
# toolchain (glibc, libstdc++, C++20) has aligned_alloc: say so for every file.
target_compile_definitions(coserve_asio INTERFACE ASIO_HAS_STD_ALIGNED_ALLOC=1)
# Asio 1.22 enables co_await under clang only with <experimental/coroutine> (libc++); clang with
# libstdc++ has <coroutine>, which Asio then uses.
target_compile_definitions(coserve_asio INTERFACE $<$<CXX_COMPILER_ID:Clang>:ASIO_HAS_CO_AWAIT=1>)
target_link_libraries(coserve_asio INTERFACE Threads::Threads)

# Boost: only Beast's sans-I/O HTTP parser and serializer (header-only).
find_package(Boost 1.74 REQUIRED)
add_library(coserve_beast INTERFACE)
target_link_libraries(coserve_beast INTERFACE Boost::headers)
target_compile_definitions(coserve_beast INTERFACE BOOST_BEAST_USE_STD_STRING_VIEW)

find_package(simdjson REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
# Google Highway (SIMD with run-time dispatch) for the CPU kernels.
pkg_check_modules(HWY REQUIRED IMPORTED_TARGET libhwy)
# KV-cache events (--kv-events-config): ZeroMQ sockets and msgpack-c's C++ packer (header-only).
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
find_package(msgpack 4 CONFIG REQUIRED)  # Debian's libmsgpack-cxx-dev: target msgpackc-cxx

if(COSERVE_BUILD_TESTS)
  find_package(Catch2 2.13 REQUIRED)
  include(Catch)
endif()

# xgrammar's C++ core (structured outputs: JSON schema, regex, EBNF -> token masks), built from the
# PyPI sdist that scripts/deps fetches and unpacks into the cache. C++17, our compiler and
# sanitizer flags, its own warnings silenced, no debug info (it is third-party code), Python
# bindings (cpp/tvm_ffi) left out.
if(DEFINED ENV{COSERVE_CACHE})
  set(_coserve_deps_default "$ENV{COSERVE_CACHE}/deps")
else()
  set(_coserve_deps_default "$ENV{HOME}/.cache/coserve/deps")
endif()
set(COSERVE_XGRAMMAR_DIR "${_coserve_deps_default}/xgrammar-0.2.8" CACHE PATH
    "xgrammar 0.2.8 sources (scripts/deps unpacks them here)")
if(NOT EXISTS "${COSERVE_XGRAMMAR_DIR}/include/xgrammar/xgrammar.h")
  message(FATAL_ERROR "xgrammar sources not found in ${COSERVE_XGRAMMAR_DIR}: run scripts/deps "
                      "(or pass -DCOSERVE_XGRAMMAR_DIR=<unpacked xgrammar-0.2.8 sdist>)")
endif()
file(GLOB_RECURSE _xgrammar_sources CONFIGURE_DEPENDS "${COSERVE_XGRAMMAR_DIR}/cpp/*.cc")
list(FILTER _xgrammar_sources EXCLUDE REGEX "/cpp/tvm_ffi/.*\\.cc$")
# model/xgrammar_logging.cpp is xgrammar's log sink (XGRAMMAR_LOG_CUSTOMIZE): warnings about
# ignored JSON-schema keywords become request errors instead of stderr lines.
add_library(coserve_xgrammar STATIC ${_xgrammar_sources} ${PROJECT_SOURCE_DIR}/model/xgrammar_logging.cpp)
set_target_properties(coserve_xgrammar PROPERTIES CXX_STANDARD 17 CXX_EXTENSIONS OFF)
target_include_directories(coserve_xgrammar SYSTEM PUBLIC "${COSERVE_XGRAMMAR_DIR}/include")
target_include_directories(coserve_xgrammar SYSTEM PUBLIC "${COSERVE_XGRAMMAR_DIR}/3rdparty/picojson"
                                                         "${COSERVE_XGRAMMAR_DIR}/3rdparty/dlpack/include")
target_compile_definitions(coserve_xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 PRIVATE XGRAMMAR_LOG_CUSTOMIZE=1)
target_include_directories(coserve_xgrammar PRIVATE "${COSERVE_XGRAMMAR_DIR}/cpp" "${PROJECT_SOURCE_DIR}")
target_compile_options(coserve_xgrammar PRIVATE -w -g0)
# Under ASan and in the fuzz build xgrammar is compiled without the sanitizers and libFuzzer's
# coverage (it took a sixth of the ASan build's compile time): its own memory errors are its
# project's to find. Its allocations still go through ASan's allocator, so project code that misuses
# memory xgrammar hands out is still caught. Under TSan it stays instrumented: TSan has to see the
# synchronisation inside it to judge the accesses around it.
if(COSERVE_SANITIZE STREQUAL "address" OR COSERVE_FUZZ)
  target_compile_options(coserve_xgrammar PRIVATE -fno-sanitize=all)
endif()
target_link_libraries(coserve_xgrammar PUBLIC Threads::Threads)
