# Which LibTorch pprun links, and which Python (with torch) the tests and benchmarks run.
#
# One build: LibTorch 2.x from a PyTorch wheel. scripts/install-deps.sh makes the project's virtual
# environment at .venv/ (torch==2.13.0, CPU, from scripts/requirements.txt); with no options this
# file takes LibTorch from that environment's torch (torch.utils.cmake_prefix_path), so
# scripts/build.sh needs no arguments. Another torch (a CUDA build, a newer release):
#     cmake -S . -B build -DPP_PYTHON=/path/to/env/bin/python
# links the LibTorch inside that interpreter's torch and runs the Python tests with it. Torch_DIR
# (CMake's own variable) still wins over both when set.
#
# Sets PP_PYTHON (cached), PP_TORCHRUN (that environment's torchrun), PP_TORCH_VERSION, and checks
# that c10d's ProcessGroupGloo.hpp compiles (see the end of this file).

set(PP_PYTHON "" CACHE FILEPATH
    "Python interpreter whose torch pprun links and the Python tests use (default: .venv/bin/python)")
if(NOT PP_PYTHON)
  if(EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
    set(PP_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python CACHE FILEPATH
        "Python interpreter whose torch pprun links and the Python tests use (default: .venv/bin/python)" FORCE)
  else()
    message(FATAL_ERROR
      "No Python environment with torch: ${PROJECT_SOURCE_DIR}/.venv/bin/python does not exist.\n"
      "Run scripts/install-deps.sh (it makes .venv/ with torch 2.13), or name an interpreter whose "
      "torch to link: -DPP_PYTHON=/path/to/bin/python (see docs/building.md).")
  endif()
endif()

execute_process(
  COMMAND ${PP_PYTHON} -c "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__)"
  OUTPUT_VARIABLE pp_torch_out ERROR_VARIABLE pp_torch_err RESULT_VARIABLE pp_torch_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT pp_torch_rc EQUAL 0)
  string(REGEX REPLACE ".*\n([^\n]+)\n?$" "\\1" pp_torch_err "${pp_torch_err}")
  message(FATAL_ERROR "PP_PYTHON=${PP_PYTHON} cannot import torch: ${pp_torch_err}\n"
                      "Run scripts/install-deps.sh, or point PP_PYTHON at an interpreter with torch 2.x.")
endif()
string(REPLACE "\n" ";" pp_torch_out "${pp_torch_out}")
list(GET pp_torch_out 0 pp_torch_prefix)
list(GET pp_torch_out 1 PP_TORCH_VERSION)
# The torch package's directory too: TorchConfig.cmake finds libc10 and libtorch with find_library,
# which searches <prefix>/lib of every CMAKE_PREFIX_PATH entry before the system's directories (a
# Debian libtorch-dev left installed would otherwise give its libc10.so).
get_filename_component(pp_torch_root ${pp_torch_prefix}/../.. ABSOLUTE)
list(PREPEND CMAKE_PREFIX_PATH ${pp_torch_prefix} ${pp_torch_root})
message(STATUS "LibTorch: torch ${PP_TORCH_VERSION} of ${PP_PYTHON}")

get_filename_component(pp_python_bin ${PP_PYTHON} DIRECTORY)
find_program(PP_TORCHRUN torchrun HINTS ${pp_python_bin} NO_DEFAULT_PATH
             DOC "torchrun of PP_PYTHON's environment (the tests launch pprun with it)")

# PyTorch's wheels link Kineto (the profiler) into libtorch_cpu and ship no libkineto, and
# TorchConfig.cmake warns on every configure when it finds none: name libtorch_cpu for it.
if(NOT kineto_LIBRARY AND EXISTS ${pp_torch_root}/lib/libtorch_cpu.so)
  set(kineto_LIBRARY ${pp_torch_root}/lib/libtorch_cpu.so CACHE FILEPATH "Kineto: inside libtorch_cpu")
endif()
find_package(Torch REQUIRED)
foreach(lib ${TORCH_LIBRARY} ${c10_LIBRARY})
  if(NOT lib MATCHES "^${pp_torch_root}/")
    message(FATAL_ERROR "LibTorch: ${lib} is not from ${pp_torch_root} (a cache from another torch? "
                        "remove ${CMAKE_BINARY_DIR}/CMakeCache.txt)")
  endif()
endforeach()
# The versions pprun is compiled against (docs/building.md, "Which LibTorch"): 2.13 (.venv's CPU
# build: the whole test suite) and 2.11 (the package index's CUDA build: every object compiled by
# scripts/torch-compile-check.sh; built and run at pp 1 on a GPU by issue 38's session). Older than
# 2.2 cannot work (AdamW's state keyed by TensorImpl*); others may, unchecked.
if(Torch_VERSION VERSION_LESS 2.2)
  message(FATAL_ERROR "pprun is compiled against LibTorch 2.11 and 2.13 (and cannot work with "
                      "releases before 2.2); ${Torch_DIR} is ${Torch_VERSION}")
endif()
if(NOT Torch_VERSION MATCHES "^2\\.(11|13)\\.")
  message(WARNING "LibTorch ${Torch_VERSION}: pprun is compiled against 2.11 and 2.13 only "
                  "(docs/building.md, \"Which LibTorch\"); scripts/torch-compile-check.sh "
                  "${Torch_VERSION} checks that it compiles against the CUDA build of another release")
endif()

# Gloo. PyTorch links Gloo statically into libtorch_cpu and its wheels ship no gloo/ headers, but
# c10d's ProcessGroupGloo.hpp includes a few (<gloo/context.h>, <gloo/rendezvous/store.h>, ...).
# We compile that header against Debian's libgloo-dev headers (/usr/include/gloo) and never link
# Debian's libgloo: every Gloo symbol pprun calls is LibTorch's. This is sound as long as the gloo
# types reach our code only behind pointers (shared_ptr<gloo::transport::Device>,
# shared_ptr<gloo::Context>) and torch's own headers give the layout of every class we construct,
# which holds for the calls runtime/transport/gloo.cpp makes (docs/building.md, "Gloo"). The
# check below fails the configure step, with what to do, when the two stop agreeing at the source
# level; a change inside gloo that keeps its headers compiling but moves a field torch's
# inline code reads would not be caught here: runtime/transport/gloo.cpp's tests are what would
# show it (pprt.GlooTransport, the multi-rank end-to-end tests).
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "${TORCH_CXX_FLAGS}")
set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
set(CMAKE_REQUIRED_DEFINITIONS -DUSE_C10D_GLOO)  # what LibTorch's CMake target defines
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)  # compile only: the symbols are libtorch_cpu's
set(CMAKE_REQUIRED_QUIET ON)
check_cxx_source_compiles([[
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
int main() {
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  return options->devices.size() == 1 ? 0 : 1;
}
]] PP_GLOO_HEADERS_COMPILE)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_DEFINITIONS)
unset(CMAKE_TRY_COMPILE_TARGET_TYPE)
unset(CMAKE_REQUIRED_QUIET)
if(NOT PP_GLOO_HEADERS_COMPILE)
  message(FATAL_ERROR
    "LibTorch ${Torch_VERSION}'s torch/csrc/distributed/c10d/ProcessGroupGloo.hpp does not compile "
    "against the gloo headers on this machine. PyTorch wheels ship no gloo/ headers; pprun takes "
    "them from Debian's libgloo-dev (apt-get install libgloo-dev; scripts/install-deps.sh does). "
    "If libgloo-dev is installed, this torch expects a newer gloo than those headers: see "
    "docs/building.md, 'Gloo'. The compiler's output is in "
    "${CMAKE_BINARY_DIR}/CMakeFiles/CMakeError.log (CMakeConfigureLog.yaml from CMake 3.26); re-run "
    "cmake after fixing "
    "(cmake -U PP_GLOO_HEADERS_COMPILE ...).")
endif()
