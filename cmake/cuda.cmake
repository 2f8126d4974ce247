# The optional CUDA backend. BULKBLOOM_CUDA: AUTO builds it when nvcc is found, ON requires it,
# OFF never builds it. Without it the library is CPU-only and Backend::cuda reports itself absent.
set(BULKBLOOM_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE BULKBLOOM_CUDA PROPERTY STRINGS AUTO ON OFF)

set(BULKBLOOM_WITH_CUDA OFF)
if(NOT BULKBLOOM_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  # CUDA 12.0 is the first whose nvcc takes -std=c++20 and whose CUB sorts more than 2^31 - 1
  # items (num_items was an int before CUB 1.16); a device batch holds up to 2^32 - 1 keys. The
  # version is read before enable_language: an older nvcc fails CMake's compiler check on the
  # sm_90 default below before any message could say why.
  set(bulkbloom_nvcc_version "")
  if(CMAKE_CUDA_COMPILER)
    execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --version OUTPUT_VARIABLE bulkbloom_nvcc_says
                    ERROR_QUIET)
    if(bulkbloom_nvcc_says MATCHES "release ([0-9]+\\.[0-9]+)")
      set(bulkbloom_nvcc_version "${CMAKE_MATCH_1}")
    endif()
  endif()
  if(bulkbloom_nvcc_version AND bulkbloom_nvcc_version VERSION_LESS 12.0)
    if(BULKBLOOM_CUDA STREQUAL "ON")
      message(FATAL_ERROR "BULKBLOOM_CUDA=ON but ${CMAKE_CUDA_COMPILER} is CUDA "
                          "${bulkbloom_nvcc_version}; the CUDA backend needs 12.0 or later")
    endif()
    message(STATUS "bulkbloom CUDA backend: skipped, ${CMAKE_CUDA_COMPILER} is CUDA "
                   "${bulkbloom_nvcc_version}, older than 12.0")
  elseif(CMAKE_CUDA_COMPILER)
    # Machine code for Hopper (the target of the performance work) plus PTX that the driver
    # compiles for any other GPU from Ampere on, unless the builder chose. Embedded, only the
    # library's own target gets them: the embedding project's default stays its own.
    set(BULKBLOOM_CUDA_ARCHITECTURES "")
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(BULKBLOOM_CUDA_ARCHITECTURES 90-real 80-virtual)
      if(BULKBLOOM_TOP_LEVEL)
        set(CMAKE_CUDA_ARCHITECTURES ${BULKBLOOM_CUDA_ARCHITECTURES})
      endif()
    endif()
    enable_language(CUDA)
    # The toolkit's version too: a CUDA compiler other than nvcc printed no CUDA release above.
    find_package(CUDAToolkit 12.0 REQUIRED)
    set(BULKBLOOM_WITH_CUDA ON)
  elseif(BULKBLOOM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "BULKBLOOM_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER "
                        "or put nvcc on PATH)")
  endif()
endif()
message(STATUS "bulkbloom CUDA backend: ${BULKBLOOM_WITH_CUDA}")

if(BULKBLOOM_TOP_LEVEL AND BULKBLOOM_WITH_CUDA AND BULKBLOOM_CCACHE
   AND NOT CMAKE_CUDA_COMPILER_LAUNCHER)
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${BULKBLOOM_CCACHE})
endif()

# Adds the CUDA engine to `target`: its host side (plain C++, built everywhere so that the tests
# can run it against a fake runtime) and, when the backend is built, the CUDA runtime and kernels.
function(bulkbloom_add_cuda_backend target)
  target_sources(${target} PRIVATE src/cuda/device_engine.cpp src/cuda/device_bench.cpp)
  if(NOT BULKBLOOM_WITH_CUDA)
    return()
  endif()
  target_sources(${target} PRIVATE src/cuda/cuda_device.cu)
  if(BULKBLOOM_CUDA_ARCHITECTURES)
    set_property(TARGET ${target} PROPERTY CUDA_ARCHITECTURES ${BULKBLOOM_CUDA_ARCHITECTURES})
  endif()
  target_compile_definitions(${target} PRIVATE BULKBLOOM_HAVE_CUDA=1)
  # CMake 3.25 knows no C++20 flag for nvcc (CUDA_STANDARD 20 fails there), so pass it directly.
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 -Xcompiler=-Wall>)
  # A register spill or any local memory in a kernel (ours or Thrust's sort) fails the build, so
  # every build checks what -Xptxas -v would show.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-warn-spills,-warn-lmem-usage,-Werror>)
  # Static, so a consumer needs no CUDA runtime library of a matching version at run time; the
  # installed package config finds CUDAToolkit for this target.
  target_link_libraries(${target} PRIVATE CUDA::cudart_static)
endfunction()
