# The emulated variant (COURSE_VARIANTS): each solution with its real checker, built with the
# host compiler against the CUDA runtime of shadow/ (emu.h runs the kernels), as the target
# <module>.<id>.emulated in bin/ and the CTest test of that name (label emulated); where the
# exercise has a fast reference, that one too, as <module>.<id>.emulated_fast (CTest only: the
# grader's --emulate grades the readable solutions), unless its own path is sm_90a's (fast_arch). The checkers' timing cases skip there: the
# emulated GPU reports 512 MB free; so do the cases a checker marks COURSE_SKIP_ON_EMULATOR.
# COURSE_EMULATED_MODULES names the modules the emulator can run: not those whose kernels use TMA,
# wgmma or inline PTX of their own (dev/README.md); module 07's tensor-core instructions are
# carried out on the host by modules/07_attention/tensor_core.h here (modules 09 and 10 include the
# same header: modules/09_quantization/tensor_core.h and modules/10_inference/tensor_core.h here
# include this folder's).
set(COURSE_EMULATED_MODULES 06_softmax_norms 07_attention 08_training 09_quantization 10_inference
    CACHE STRING "Modules whose solutions run on the CPU emulator (the emulated variant)")

# The architecture the emulated device code is compiled as (__CUDA_ARCH__ / 10): 90, Hopper's
# paths (clusters); 75, a T4's, which gives the tensor-core exercises fp16 and sm_75's
# instructions (course/tensor_element.h), as a build for sm_75 does on a GPU.
set(COURSE_EMULATED_ARCH 90 CACHE STRING "Architecture the emulated device code is compiled as (90 or 75)")

find_package(Python3 3.10 REQUIRED COMPONENTS Interpreter)
set(COURSE_EMU_DIR "${CMAKE_CURRENT_LIST_DIR}")

# emu_translate(<variable> <file.cu> [SEQUENTIAL] [INLINES <other.cu>...]): the translated .cpp
# (translate.py) of a CUDA source, in the build tree; SEQUENTIAL for kernels without barriers (the
# harness's fills); INLINES the .cu files it includes (translated into it: it depends on them).
function(emu_translate variable source)
  cmake_parse_arguments(T "SEQUENTIAL" "" "INLINES" ${ARGN})
  file(RELATIVE_PATH relative "${PROJECT_SOURCE_DIR}" "${source}")
  string(MAKE_C_IDENTIFIER "${relative}" name)
  set(output "${CMAKE_BINARY_DIR}/emulated/${name}.cpp")
  set(mode "")
  if(T_SEQUENTIAL)
    set(mode --sequential)
  endif()
  add_custom_command(OUTPUT "${output}"
    COMMAND Python3::Interpreter "${COURSE_EMU_DIR}/translate.py" ${mode} "${source}" "${output}"
    DEPENDS "${source}" ${T_INLINES} "${COURSE_EMU_DIR}/translate.py"
    COMMENT "emu: translating ${relative}")
  set(${variable} "${output}" PARENT_SCOPE)
endfunction()

# What every emulated target compiles with: the shadow CUDA headers ahead of everything, device
# code compiled as for COURSE_EMULATED_ARCH (Hopper by default: course/cluster.h then uses
# clusters, which the emulator has; 75 adds the fp16 definition of a build for a T4), and
# COURSE_EMULATOR defined (course::emulated(): the checkers skip what would take minutes here).
function(emu_compile_as_device target)
  target_include_directories(${target} BEFORE PRIVATE "${COURSE_EMU_DIR}/shadow" "${COURSE_EMU_DIR}")
  course_tensor_element_definitions(element_definitions "${COURSE_EMULATED_ARCH}")
  target_compile_definitions(${target} PRIVATE __CUDA_ARCH__=${COURSE_EMULATED_ARCH}0 COURSE_EMULATOR
                                               ${element_definitions})
  target_compile_options(${target} PRIVATE -Wno-unknown-pragmas)
endfunction()

emu_translate(buffer "${PROJECT_SOURCE_DIR}/common/src/buffer.cu" SEQUENTIAL)
emu_translate(bench "${PROJECT_SOURCE_DIR}/common/src/bench.cu" SEQUENTIAL)
emu_translate(gpu "${PROJECT_SOURCE_DIR}/common/src/gpu.cu" SEQUENTIAL)
emu_translate(hashed "${PROJECT_SOURCE_DIR}/common/src/hashed.cu" SEQUENTIAL)
emu_translate(attention_gpu "${PROJECT_SOURCE_DIR}/common/src/attention_gpu.cu")
# No baselines library: course/baselines.h then says "no baseline" (the timing cases that call
# one skip before, for want of memory).
add_library(course_emu_harness STATIC ${attention_gpu} ${buffer} ${bench} ${gpu} ${hashed}
            "${PROJECT_SOURCE_DIR}/common/src/error_notes.cpp" "${PROJECT_SOURCE_DIR}/common/src/large.cpp"
            "${PROJECT_SOURCE_DIR}/common/src/main.cpp")
emu_compile_as_device(course_emu_harness)
target_link_libraries(course_emu_harness PUBLIC course_harness_host GTest::gtest)

# One exercise, called by course_exercise for the emulated variant.
function(course_emulated_exercise)
  cmake_parse_arguments(EX "" "MODULE;ID;FILE;CHECKER;MIN_SM;FAST_SOLUTION;FAST_ARCH" "" ${ARGN})
  if(NOT EX_MODULE IN_LIST COURSE_EMULATED_MODULES)
    return()
  endif()
  if(EX_MIN_SM GREATER_EQUAL 90)
    # TMA, mbarriers and wgmma (07_attention/flash_wgmma) have no emulation: a checker that skips.
    set(target "${EX_MODULE}.${EX_ID}.emulated")
    add_executable(${target} "${PROJECT_SOURCE_DIR}/common/src/missing_library_test.cpp")
    target_compile_definitions(${target} PRIVATE
      "COURSE_MISSING_LIBRARY=\"not emulated: TMA, mbarriers and wgmma run on a Hopper GPU only\"")
    # GoogleTest without its main(): the checker has its own, with the report channel.
    target_link_libraries(${target} PRIVATE GTest::gtest)
    set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bin")
    add_test(NAME ${target} COMMAND ${target} --gtest_color=no)
    set_tests_properties(${target} PROPERTIES LABELS "${EX_MODULE};emulated"
                         SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\] [0-9]+ test")
    return()
  endif()
  set(module_dir "${PROJECT_SOURCE_DIR}/modules/${EX_MODULE}")
  emu_translate(checker_source "${module_dir}/${EX_CHECKER}")
  set(readable "${COURSE_SOLUTIONS_DIR}/${EX_MODULE}/${EX_FILE}")
  set(references emulated "${EX_FILE}")
  # A fast reference whose own path is sm_90a's (FAST_ARCH: TMA and wgmma) would run its readable
  # solution's path here, which the emulated readable solution already runs: none.
  if(EX_FAST_SOLUTION AND NOT EX_FAST_ARCH)
    list(APPEND references emulated_fast "${EX_FAST_SOLUTION}")
  endif()
  while(references)
    list(POP_FRONT references variant file)
    # A fast reference includes its readable solution.
    emu_translate(solution_source "${COURSE_SOLUTIONS_DIR}/${EX_MODULE}/${file}" INLINES
                  "${readable}")
    set(target "${EX_MODULE}.${EX_ID}.${variant}")
    add_executable(${target} ${checker_source} ${solution_source})
    emu_compile_as_device(${target})
    # The translated files live in the build tree: their quoted includes need the originals'
    # folders, after modules/<module>/ of this folder where it exists: the module's headers of
    # inline PTX, carried out on the host (a header there replaces the module's of that name).
    get_filename_component(checker_dir "${module_dir}/${EX_CHECKER}" DIRECTORY)
    if(IS_DIRECTORY "${COURSE_EMU_DIR}/modules/${EX_MODULE}")
      target_include_directories(${target} BEFORE PRIVATE "${COURSE_EMU_DIR}/modules/${EX_MODULE}")
    endif()
    target_include_directories(${target} PRIVATE "${module_dir}" "${checker_dir}"
                                                 "${COURSE_SOLUTIONS_DIR}/${EX_MODULE}")
    target_compile_definitions(${target} PRIVATE COURSE_MIN_SM=${EX_MIN_SM})
    target_link_libraries(${target} PRIVATE course_emu_harness)
    set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bin")
    add_test(NAME ${target} COMMAND ${target} --gtest_color=no)
    set_tests_properties(${target} PROPERTIES LABELS "${EX_MODULE};emulated" TIMEOUT 900)
  endwhile()
endfunction()
