# Finding the LibTorch of a pip-installed torch wheel, for pointops' own build and for the projects
# that find_package(pointops) (installed beside pointopsConfig.cmake).
#
# A CUDA build of the torch wheel brings its CUDA libraries as Python packages (site-packages/nvidia)
# with versioned file names only, and its CMake config asks for a CUDA toolkit with libnvrtc. On a
# machine with a compiler-only toolkit (nvcc and the runtime, as CI and build machines without a GPU
# have) that config stops at "Your installed Caffe2 version uses CUDA but I cannot find the CUDA
# libraries". pointops_find_torch() fills in what it can find, unless the caller set it:
#   CUDA_TOOLKIT_ROOT_DIR, CMAKE_CUDA_COMPILER  from CUDA_HOME, else /usr/local/cuda (setup.py's rule)
#   CUDA_nvrtc_LIBRARY                          the toolkit's libnvrtc.so, else the wheel's (nvidia/cu*/lib)
# and then calls find_package(Torch REQUIRED), so TORCH_LIBRARIES and the torch targets are set.

# The torch install prefix (site-packages/torch) that holds TorchConfig.cmake: from Torch_DIR, else
# from the folders of CMAKE_PREFIX_PATH (torch.utils.cmake_prefix_path is <prefix>/share/cmake).
function(pointops_torch_prefix out)
  set(candidates "")
  if(Torch_DIR)
    list(APPEND candidates "${Torch_DIR}")
  endif()
  foreach(prefix IN LISTS CMAKE_PREFIX_PATH)
    list(APPEND candidates "${prefix}/Torch" "${prefix}/share/cmake/Torch")
  endforeach()
  string(REPLACE ":" ";" env_prefixes "$ENV{CMAKE_PREFIX_PATH}")
  foreach(prefix IN LISTS env_prefixes)
    list(APPEND candidates "${prefix}/Torch" "${prefix}/share/cmake/Torch")
  endforeach()
  foreach(dir IN LISTS candidates)
    if(EXISTS "${dir}/TorchConfig.cmake")
      get_filename_component(prefix "${dir}/../../.." ABSOLUTE)
      set(${out} "${prefix}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

# A CUDA toolkit folder with nvcc and the runtime's headers: CUDA_HOME, else /usr/local/cuda.
function(pointops_cuda_toolkit_root out)
  foreach(root "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}" "/usr/local/cuda")
    if(root AND EXISTS "${root}/bin/nvcc" AND (EXISTS "${root}/include/cuda_runtime.h"
                                               OR EXISTS "${root}/targets/x86_64-linux/include/cuda_runtime.h"))
      get_filename_component(root "${root}" REALPATH)
      set(${out} "${root}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

macro(pointops_find_torch)
  pointops_torch_prefix(_pointops_torch_prefix)
  if(_pointops_torch_prefix AND EXISTS "${_pointops_torch_prefix}/lib/libtorch_cuda.so")
    pointops_cuda_toolkit_root(_pointops_toolkit)
    if(_pointops_toolkit)
      if(NOT DEFINED CUDA_TOOLKIT_ROOT_DIR AND "$ENV{CUDA_TOOLKIT_ROOT_DIR}" STREQUAL "")
        set(CUDA_TOOLKIT_ROOT_DIR "${_pointops_toolkit}")
      endif()
      if(NOT DEFINED CMAKE_CUDA_COMPILER AND "$ENV{CUDACXX}" STREQUAL "")
        set(CMAKE_CUDA_COMPILER "${_pointops_toolkit}/bin/nvcc")
      endif()
    endif()
    if(NOT DEFINED CUDA_nvrtc_LIBRARY)
      file(GLOB _pointops_nvrtc
        "${_pointops_toolkit}/lib64/libnvrtc.so"
        "${_pointops_toolkit}/targets/x86_64-linux/lib/libnvrtc.so"
        "${_pointops_torch_prefix}/../nvidia/cu*/lib/libnvrtc.so.[0-9]*"
        "${_pointops_torch_prefix}/../nvidia/cuda_nvrtc/lib/libnvrtc.so.[0-9]*")
      list(FILTER _pointops_nvrtc EXCLUDE REGEX "builtins|alt")
      if(_pointops_nvrtc)
        list(GET _pointops_nvrtc 0 _pointops_nvrtc)
        set(CUDA_nvrtc_LIBRARY "${_pointops_nvrtc}" CACHE FILEPATH "libnvrtc for torch's CUDA libraries")
      endif()
    endif()
  endif()
  find_package(Torch REQUIRED)
  if(TORCH_LIBRARIES MATCHES "NOTFOUND")
    message(FATAL_ERROR "pointops: torch's CMake config left libraries unfound (${TORCH_LIBRARIES}); "
                        "set the missing one (for example -DCUDA_nvrtc_LIBRARY=/path/to/libnvrtc.so.13)")
  endif()
endmacro()
