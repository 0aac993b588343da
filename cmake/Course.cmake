# Build helpers shared by every module. CONTRIBUTING.md describes the conventions they implement.

set(COURSE_DEFAULT_CUDA_ARCHITECTURE 75 CACHE STRING
    "CUDA architecture used when no GPU is visible (CI). 75 = Turing (T4), the oldest CUDA 13 targets")

# Picks the CUDA architecture before CUDA is enabled: the GPU in this machine if nvidia-smi sees
# one (so a learner builds exactly for their card), else the fixed default.
function(course_select_cuda_architecture)
  if(DEFINED CMAKE_CUDA_ARCHITECTURES OR DEFINED ENV{CUDAARCHS})
    return()
  endif()
  set(arch "${COURSE_DEFAULT_CUDA_ARCHITECTURE}")
  set(reason "no GPU visible")
  find_program(COURSE_NVIDIA_SMI nvidia-smi)
  if(COURSE_NVIDIA_SMI)
    execute_process(COMMAND "${COURSE_NVIDIA_SMI}" --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET TIMEOUT 20)
    if(rc EQUAL 0 AND caps MATCHES "^([0-9]+)\\.([0-9]+)")
      set(arch "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
      set(reason "the GPU in this machine")
    endif()
  endif()
  message(STATUS "CUDA architecture: sm_${arch} (${reason})")
  set(CMAKE_CUDA_ARCHITECTURES "${arch}" CACHE STRING "CUDA architectures to build for")
endfunction()

# Enables CUDA with a clear message when nvcc is missing.
macro(course_enable_cuda)
  course_select_cuda_architecture()
  # check_language() caches what it found, NOTFOUND included: look again on every configure, so
  # that nvcc put on PATH (or CUDACXX set) after a failed configure is found.
  if(NOT CMAKE_CUDA_COMPILER)
    unset(CMAKE_CUDA_COMPILER CACHE)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    # The grader recognizes this text (grader/build.py: NVCC_MISSING).
    message(FATAL_ERROR "No CMAKE_CUDA_COMPILER could be found: install the CUDA toolkit (nvcc) "
                        "or point CUDACXX at nvcc.")
  endif()
  # One CUDA runtime for the whole process: the checkers and the shared baselines library must
  # see the same device allocations and streams.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endmacro()

# GoogleTest: the installed package, else the Debian source tree, else a download.
macro(course_find_gtest)
  find_package(GTest 1.11 CONFIG QUIET)
  if(NOT GTest_FOUND)
    set(COURSE_GTEST_SOURCE_DIR "/usr/src/googletest" CACHE PATH "GoogleTest sources to build")
    if(EXISTS "${COURSE_GTEST_SOURCE_DIR}/CMakeLists.txt")
      message(STATUS "GoogleTest: building from ${COURSE_GTEST_SOURCE_DIR}")
      set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
      add_subdirectory("${COURSE_GTEST_SOURCE_DIR}" "${CMAKE_BINARY_DIR}/_deps/googletest"
                       EXCLUDE_FROM_ALL)
    else()
      message(STATUS "GoogleTest: not installed, fetching v1.15.2")
      include(FetchContent)
      FetchContent_Declare(googletest
        URL https://github.com/google/googletest/archive/refs/tags/v1.15.2.tar.gz
        URL_HASH SHA256=7b42b4d6ed48810c5362c265a17faebe90dc2373c885e5216439d37927f02926
        DOWNLOAD_EXTRACT_TIMESTAMP ON)
      set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
      FetchContent_MakeAvailable(googletest)
    endif()
  endif()
endmacro()

# Sets `variable` to whether `path` exists, and makes the build run CMake again when that changes:
# a file missing at one configure (a branch switch, a stash) gets its targets back once it returns.
function(course_file_exists variable path)
  file(GLOB found CONFIGURE_DEPENDS "${path}")
  if(found)
    set(${variable} TRUE PARENT_SCOPE)
  else()
    set(${variable} FALSE PARENT_SCOPE)
  endif()
endfunction()

# The CUDA architectures of an exercise: the tree's, except that an exercise for Hopper's own
# instructions (min_sm 90 or more: wgmma, setmaxnreg) builds for the arch-specific target 90a where
# the tree builds for 90 (nvcc: -gencode arch=compute_90a,code=sm_90a). Code for 90a runs on compute
# capability 9.0 only; on any other architecture such an exercise still builds, its kernels compiled
# out (#if defined(__CUDA_ARCH_FEAT_SM90_ALL)), and its checker skips.
function(course_exercise_architectures variable min_sm)
  set(architectures "${CMAKE_CUDA_ARCHITECTURES}")
  if(min_sm GREATER_EQUAL 90)
    list(TRANSFORM architectures REPLACE "^90(-real|-virtual|)$" "90a\\1")
  endif()
  set(${variable} "${architectures}" PARENT_SCOPE)
endfunction()

# The definitions of the tensor-core exercises' element type (course/tensor_element.h): fp16
# (COURSE_FP16_TENSOR_CORES) where the oldest architecture the tree builds for has no bf16 tensor
# cores (below 80: a T4, whose fp16 ones the exercises then use), bf16 otherwise. Set on the
# exercises' targets only: the trainer, which calls module 07's kernels in bf16, keeps its contract.
function(course_tensor_element_definitions variable architectures)
  set(definitions "")
  foreach(architecture IN LISTS architectures)
    if(architecture MATCHES "^([0-9]+)" AND CMAKE_MATCH_1 LESS 80)
      set(definitions COURSE_FP16_TENSOR_CORES)
    endif()
  endforeach()
  set(${variable} "${definitions}" PARENT_SCOPE)
endfunction()

# The variants of an exercise whose library this build lacks: each a checker that skips its one
# test with `reason` (the grader then reports skipped, with it). Same target names as
# course_exercise makes, so that the grader finds them.
function(course_missing_library_exercise module id fast_solution reason)
  foreach(variant IN LISTS COURSE_VARIANTS)
    if(variant STREQUAL "emulated" OR (variant STREQUAL "fast" AND NOT fast_solution))
      continue()
    endif()
    set(target "${module}.${id}.${variant}")
    add_executable(${target} "${PROJECT_SOURCE_DIR}/common/src/missing_library_test.cpp")
    target_compile_definitions(${target} PRIVATE "COURSE_MISSING_LIBRARY=\"${reason}\"")
    # GoogleTest without its main(): the checker has its own, with the report channel.
    target_link_libraries(${target} PRIVATE GTest::gtest)
    set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bin")
    add_test(NAME ${target} COMMAND ${target} --gtest_color=no)
    set_tests_properties(${target} PROPERTIES
      LABELS "${module};${variant}"
      SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\] [0-9]+ test")
  endforeach()
endfunction()

# One exercise: its checker compiled once, linked with the stub (learner), the readable solution
# (solution) and/or the fast reference (fast, only where the manifest names a fast_solution).
#   course_exercise(MODULE 01_basics ID vector_add FILE vector_add.cu
#                   CHECKER tests/vector_add_test.cu MIN_SM 75 [MIN_GPUS 2]
#                   [FAST_SOLUTION vector_add_fast.cu [FAST_ARCH 90a]] [LIBRARY nccl])
# LIBRARY: the one library the exercise may call (the manifest's `library`), linked into its
# checker and every variant; where this build lacks it, each variant is a checker that skips with
# the reason (common/src/missing_library_test.cpp), since neither the code nor its checker compiles.
# FAST_ARCH 90a: the fast reference has a path in Hopper's own instructions (wgmma, TMA) beside its
# readable solution's, so its variant builds for 90a where the tree builds for 90, as an exercise of
# min_sm 90 does (the manifest's fast_arch; pairwise_cosine's); the other variants keep the tree's.
function(course_exercise)
  cmake_parse_arguments(EX "" "MODULE;ID;FILE;CHECKER;MIN_SM;MIN_GPUS;FAST_SOLUTION;FAST_ARCH;LIBRARY"
                        "" ${ARGN})
  if(NOT EX_MIN_GPUS)
    set(EX_MIN_GPUS 1)
  endif()
  set(module_dir "${PROJECT_SOURCE_DIR}/modules/${EX_MODULE}")
  set(base "${EX_MODULE}.${EX_ID}")
  # For the trainer, which builds some exercises' files into libraries of its own (module 08).
  set_property(GLOBAL PROPERTY "COURSE_EXERCISE_${EX_MODULE}/${EX_ID}"
               "${EX_FILE};${EX_MIN_SM};${EX_FAST_SOLUTION}")
  if(EX_LIBRARY STREQUAL "nccl")
    get_property(have_nccl GLOBAL PROPERTY COURSE_HAVE_NCCL)
    if(NOT have_nccl)
      course_missing_library_exercise(${EX_MODULE} ${EX_ID} "${EX_FAST_SOLUTION}"
        "NCCL is missing from this build (pip install nvidia-nccl-cu13, set COURSE_NCCL_ROOT to its nvidia/nccl folder, then grader run again): this exercise calls it")
      return()
    endif()
  elseif(EX_LIBRARY)
    message(FATAL_ERROR "${base}: library ${EX_LIBRARY}: only nccl (grader/manifest.py)")
  endif()
  # A missing file makes no target (the grader reports it as missing before building)
  # instead of failing the whole configure: one broken exercise must not block the others.
  course_file_exists(checker_exists "${module_dir}/${EX_CHECKER}")
  if(NOT checker_exists)
    message(WARNING "${base}: checker ${EX_CHECKER} not found; no targets for this exercise")
    return()
  endif()

  add_library(${base}.checker OBJECT "${module_dir}/${EX_CHECKER}")
  target_include_directories(${base}.checker PRIVATE "${module_dir}")
  course_tensor_element_definitions(element_definitions "${CMAKE_CUDA_ARCHITECTURES}")
  target_compile_definitions(${base}.checker PRIVATE COURSE_MIN_SM=${EX_MIN_SM}
                                                     COURSE_MIN_GPUS=${EX_MIN_GPUS}
                                                     ${element_definitions})
  target_link_libraries(${base}.checker PRIVATE course::harness)
  if(EX_LIBRARY STREQUAL "nccl")
    target_link_libraries(${base}.checker PRIVATE course_nccl)
  endif()
  course_exercise_architectures(architectures ${EX_MIN_SM})
  if(NOT architectures STREQUAL CMAKE_CUDA_ARCHITECTURES)
    set_target_properties(${base}.checker PROPERTIES CUDA_ARCHITECTURES "${architectures}")
  endif()
  # The checker loads the baselines library at run time from this path (course/baselines.h): the
  # executable does not link it, so the exercise's code cannot call what it is measured against.
  get_target_property(baselines_type course_baselines TYPE)
  set(load_baselines FALSE)
  if(baselines_type STREQUAL "SHARED_LIBRARY")
    set(load_baselines TRUE)
    target_compile_definitions(${base}.checker PRIVATE
                               "COURSE_BASELINES_LIBRARY=\"$<TARGET_FILE:course_baselines>\"")
  endif()

  foreach(variant IN LISTS COURSE_VARIANTS)
    if(variant STREQUAL "emulated")
      # The solution and its checker built for the CPU emulator (dev/emu/Emulate.cmake).
      course_emulated_exercise(MODULE ${EX_MODULE} ID ${EX_ID} FILE ${EX_FILE}
                               CHECKER ${EX_CHECKER} MIN_SM ${EX_MIN_SM}
                               FAST_SOLUTION "${EX_FAST_SOLUTION}" FAST_ARCH "${EX_FAST_ARCH}")
      continue()
    elseif(variant STREQUAL "learner")
      set(source "${module_dir}/${EX_FILE}")
    elseif(variant STREQUAL "solution")
      set(source "${COURSE_SOLUTIONS_DIR}/${EX_MODULE}/${EX_FILE}")
    elseif(variant STREQUAL "fast")
      if(NOT EX_FAST_SOLUTION)
        continue()  # the readable solution is this exercise's only reference
      endif()
      set(source "${COURSE_SOLUTIONS_DIR}/${EX_MODULE}/${EX_FAST_SOLUTION}")
    else()
      message(FATAL_ERROR
              "COURSE_VARIANTS: unknown variant '${variant}' (learner, solution, fast, emulated)")
    endif()
    set(target "${base}.${variant}")
    set(variant_architectures "${architectures}")
    if(variant STREQUAL "fast" AND EX_FAST_ARCH STREQUAL "90a")
      course_exercise_architectures(variant_architectures 90)
    endif()
    course_file_exists(source_exists "${source}")
    if(NOT source_exists)
      message(WARNING "${target}: ${source} not found; no target")
      continue()
    endif()
    add_executable(${target} "${source}" $<TARGET_OBJECTS:${base}.checker>)
    target_include_directories(${target} PRIVATE "${module_dir}")
    # course::exercise is all a stub may use; the harness is the checker's, and the baselines
    # are loaded by the checker (dlopen: CMAKE_DL_LIBS), never linked.
    target_link_libraries(${target} PRIVATE course::exercise course::harness ${CMAKE_DL_LIBS})
    target_compile_definitions(${target} PRIVATE ${element_definitions})
    if(EX_LIBRARY STREQUAL "nccl")
      target_link_libraries(${target} PRIVATE course_nccl)
    endif()
    if(NOT variant_architectures STREQUAL CMAKE_CUDA_ARCHITECTURES)
      set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${variant_architectures}")
    endif()
    if(load_baselines)
      add_dependencies(${target} course_baselines)
    endif()
    set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bin")
    add_test(NAME ${target} COMMAND ${target} --gtest_color=no)
    set_tests_properties(${target} PROPERTIES
      LABELS "${EX_MODULE};${variant}"
      SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\] [0-9]+ test"
      TIMEOUT 600)
  endforeach()
endfunction()

# A module: one course_exercise() per [[exercise]] of its module.toml. CMake has no TOML parser,
# so it reads the one-line keys it needs; `grader check` enforces that form. An exercise of kind
# "trainer" (module 08's train_gpt) or "torch" (its torch_ops) has no checker: the trainer
# (trainer/CMakeLists.txt) or PyTorch (course_torch/) is its build, and the grader runs it.
function(course_module module_dir)
  get_filename_component(module "${module_dir}" NAME)
  # A new or renamed exercise must re-run CMake, as an edited CMakeLists.txt would.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${module_dir}/module.toml")
  file(READ "${module_dir}/module.toml" manifest)
  string(REGEX MATCHALL
    "\n(\\[\\[exercise\\]\\]|(id|file|checker|fast_solution|fast_arch|library|kind) = \"[^\"\n]*\"|(min_sm|min_gpus) = [0-9]+)"
    keys "\n${manifest}\n[[exercise]]")
  set(id "")
  foreach(key IN LISTS keys)
    string(STRIP "${key}" key)
    if(key STREQUAL "[[exercise]]")
      if(id AND kind STREQUAL "checker")
        course_exercise(MODULE ${module} ID ${id} FILE ${file} CHECKER ${checker} MIN_SM ${min_sm}
                        MIN_GPUS ${min_gpus} FAST_SOLUTION "${fast_solution}"
                        FAST_ARCH "${fast_arch}" LIBRARY "${library}")
      endif()
      set(id "")
      set(min_sm 0)
      set(min_gpus 1)
      set(fast_solution "")
      set(fast_arch "")
      set(library "")
      set(kind "checker")
    elseif(key MATCHES "^(id|file|checker|fast_solution|fast_arch|library|kind) = \"(.*)\"$")
      set(${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
    elseif(key MATCHES "^(min_sm|min_gpus) = ([0-9]+)$")
      set(${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
    endif()
  endforeach()
endfunction()
