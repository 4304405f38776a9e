# COSERVE_CUDA=AUTO|ON|OFF. AUTO enables CUDA when a compiler is found. Builds for sm_90a only.
set(COSERVE_WITH_CUDA OFF)
if(NOT COSERVE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES 90a)
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc 13's dialects; pass the standard explicitly per target instead
    # (coserve_cuda_flags below).
    find_package(CUDAToolkit REQUIRED)
    find_library(COSERVE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
    set(COSERVE_WITH_CUDA ON)
    add_library(coserve_cuda_flags INTERFACE)
    target_compile_options(coserve_cuda_flags INTERFACE
      $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 --expt-relaxed-constexpr -lineinfo>)
  elseif(COSERVE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "COSERVE_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "coserve: CUDA executor ${COSERVE_WITH_CUDA}")
