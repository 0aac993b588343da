// Module 08's exercise tables without a GPU: an exercise's library as trainer/CMakeLists.txt
// builds it (its contract function found by key, every other key null, its own symbols kept
// inside, an untouched stub's COURSE_TODO reaching the trainer as an error it can catch), and the
// choices file read by the table (a line that names no op, a bf16 kernel in an fp32 run, the
// table printed with what it does around each kernel), and which tables let generation capture a
// decoding step into a CUDA graph (the reference's in bf16 and fp16; not an exercise table whose
// step runs an exercise's kernel, a fast reference's bf16 entry point included). On the learner's
// stubs of 06 layernorm and 07 flash_tc, skipped in a build without the learner variant; the
// solutions' table in bf16 on 06 layernorm's readable solution (no optional bf16 entry point: the
// table converts, and says so), skipped without the solution variant; the fast references' table
// in bf16 on 05 wgmma_gemm's and 06 layernorm's fast references (their optional entry points: the
// table calls them, and says so) and 07 flash_wgmma's (the fast table's attention on Hopper: its
// flash_wgmma_packed reads the packed qkv in place), skipped without the fast variant.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include "ops.h"

namespace trainer {
namespace {

#ifndef TRAINER_TEST_LIBRARIES
#define TRAINER_TEST_LIBRARIES 0
#endif
#ifndef TRAINER_TEST_FAST_LIBRARIES
#define TRAINER_TEST_FAST_LIBRARIES 0
#endif
#ifndef TRAINER_TEST_SOLUTION_LIBRARIES
#define TRAINER_TEST_SOLUTION_LIBRARIES 0
#endif

#define SKIP_WITHOUT_LIBRARIES()                                                  \
    if (!TRAINER_TEST_LIBRARIES)                                                  \
    GTEST_SKIP() << "this build has no learner variant (COURSE_VARIANTS), so no " \
                    "learner kernel libraries"

using Entry = void* (*)(const char*);

Entry entry_of(const char* library) {
    void* handle = dlopen((std::string(TRAINER_BUILD_DIR "/trainer_kernels/") + library).c_str(),
                          RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw std::runtime_error(dlerror());
    return reinterpret_cast<Entry>(dlsym(handle, "trainer_exercise_function"));
}

// A choices file for the "learner" table; returns its path.
std::string choices(const std::string& name, const std::string& text) {
    const std::string path = ::testing::TempDir() + name;
    std::ofstream(path) << text;
    return path;
}

std::string table_error(const std::string& path) {
    configure_exercise_tables({path, 0, 0});
    try {
        exercise_table<float>("learner");
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

TEST(OpTables, SayWhetherADecodingStepCanBeACudaGraph) {
    EXPECT_EQ(ops_table<bf16>("reference")->graph_refusal(), nullptr);
    EXPECT_EQ(ops_table<fp16>("reference")->graph_refusal(), nullptr);
    const std::string fp32 = ops_table<float>("reference")->graph_refusal();
    EXPECT_NE(fp32.find("module 06's layernorm_fast, which launches on the default stream"),
              std::string::npos)
        << fp32;
    const std::string profile = ops_table<bf16>("profile")->graph_refusal();
    EXPECT_NE(profile.find("synchronizes after every op"), std::string::npos) << profile;
}

TEST(ExerciseLibrary, AnswersItsContractAndNothingElse) {
    SKIP_WITHOUT_LIBRARIES();
    const Entry entry = entry_of("06_softmax_norms.layernorm.learner.so");
    ASSERT_NE(entry, nullptr);
    EXPECT_NE(entry("layernorm"), nullptr);
    EXPECT_EQ(entry("layernorm_backward"), nullptr);
    EXPECT_EQ(entry("sgemm"), nullptr);
    EXPECT_EQ(entry("gelu_forward float"), nullptr);
    // Its functions are hidden: the trainer's own module 06 LayerNorm cannot meet it.
    void* handle =
        dlopen(TRAINER_BUILD_DIR "/trainer_kernels/06_softmax_norms.layernorm.learner.so",
               RTLD_NOW | RTLD_LOCAL);
    EXPECT_EQ(dlsym(handle, "_Z9layernormPKfS0_S0_PfS1_S1_ii"), nullptr);
}

TEST(ExerciseLibrary, AnUntouchedStubSaysTodoToTheTrainer) {
    SKIP_WITHOUT_LIBRARIES();
    const auto layernorm = reinterpret_cast<void (*)(const float*, const float*, const float*,
                                                     float*, float*, float*, int, int)>(
        entry_of("06_softmax_norms.layernorm.learner.so")("layernorm"));
    try {
        layernorm(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1);
        FAIL() << "the stub returned";
    } catch (const std::exception& e) {
        EXPECT_EQ(std::string(e.what()).rfind("[course:todo] layernorm: ", 0), 0u) << e.what();
    }
}

TEST(ExerciseTables, AChoiceThatNamesNoOpIsOneLineWithItsPlace) {
    SKIP_WITHOUT_LIBRARIES();
    const std::string path = choices("bad_op.txt",
                                     "# comment\nlayernorm 06_softmax_norms/layernorm\n"
                                     "layer_norm 06_softmax_norms/layernorm\n");
    const std::string error = table_error(path);
    EXPECT_NE(error.find(path + ":3: not \"op exercise\""), std::string::npos) << error;
}

TEST(ExerciseTables, AMissingChoicesFileSaysWhoWritesIt) {
    const std::string error = table_error(::testing::TempDir() + "no_such_choices.txt");
    EXPECT_NE(error.find("grader run 08/train_gpt` writes it"), std::string::npos) << error;
}

TEST(ExerciseTables, ABf16KernelIsRefusedInAnFp32Run) {
    SKIP_WITHOUT_LIBRARIES();
    const std::string error =
        table_error(choices("bf16_in_fp32.txt", "attention 07_attention/flash_tc\n"));
    EXPECT_NE(error.find("attention: 07_attention/flash_tc has no kernel for this op in an fp32 "
                         "run"),
              std::string::npos)
        << error;
}

// Last: the table, once loaded, stays loaded for the process.
TEST(ExerciseTables, PrintsWhichOpRunsWhoseKernelAndWhatItDoesAroundIt) {
    SKIP_WITHOUT_LIBRARIES();
    configure_exercise_tables(
        {choices("good.txt", "layernorm 06_softmax_norms/layernorm\n"), 0, 0});
    ::testing::internal::CaptureStdout();
    const Ops<float>* table = exercise_table<float>("learner");
    const std::string printed = ::testing::internal::GetCapturedStdout();
    ASSERT_NE(table, nullptr);
    EXPECT_STREQ(table->name, "learner");
    EXPECT_NE(printed.find("  layernorm           yours: 06_softmax_norms/layernorm | as its "
                           "contract says"),
              std::string::npos)
        << printed;
    EXPECT_NE(printed.find("  gemm                reference\n"), std::string::npos) << printed;
    EXPECT_EQ(exercise_table<float>("no such table"), nullptr);
    // A decoding step through it runs the learner's LayerNorm, on the default stream: no graph.
    const std::string refusal = exercise_table<bf16>("learner")->graph_refusal();
    EXPECT_NE(refusal.find("layernorm (06_softmax_norms/layernorm), launch on the default stream"),
              std::string::npos)
        << refusal;
}

// The fast table in bf16 with the fast references' optional entry points: gemm_bf16_epilogue
// (wgmma_gemm) makes each product one call, with the GELU of an unplugged gelu in its epilogue,
// and a linear layer's backward left out of the choices runs its products on it (ops_learner.cu:
// linear_forward, linear_backward); layernorm_bf16 takes the bf16 rows as they are; flash_wgmma's
// flash_wgmma_packed reads the packed qkv itself.
TEST(ExerciseTables, TheFastTableSaysWhichOpsTakeTheirBf16EntryPoints) {
    if (!TRAINER_TEST_FAST_LIBRARIES)
        GTEST_SKIP() << "this build has no fast variant (COURSE_VARIANTS), so no fast kernel "
                        "libraries";
    configure_exercise_tables({choices("fast.txt",
                                       "gemm 05_gemm_advanced/wgmma_gemm\n"
                                       "layernorm 06_softmax_norms/layernorm\n"
                                       "attention 07_attention/flash_wgmma\n"),
                               0, 0});
    ::testing::internal::CaptureStdout();
    const Ops<bf16>* table = exercise_table<bf16>("fast");
    const std::string printed = ::testing::internal::GetCapturedStdout();
    ASSERT_NE(table, nullptr);
    EXPECT_STREQ(table->name, "fast");
    for (const char* line :
         {"  gemm                fast: 05_gemm_advanced/wgmma_gemm | gemm_bf16_epilogue: each "
          "product one call into bf16",
          "  linear_backward     not plugged: its two products on gemm's kernel (fast: "
          "05_gemm_advanced/wgmma_gemm, gemm_bf16_epilogue: W read as stored, dW added into "
          "float), the bias gradient by the table's column sums\n",
          "  gelu                not plugged: in gemm's epilogue (fast: "
          "05_gemm_advanced/wgmma_gemm, gemm_bf16_epilogue)\n",
          "  layernorm           fast: 06_softmax_norms/layernorm | layernorm_bf16: the bf16 rows "
          "as they are",
          "  layernorm_backward  reference\n",
          "  attention           fast: 07_attention/flash_wgmma | flash_wgmma_packed: q, k, v "
          "read in the packed qkv [B, T, 3C], out written token-major; heads of 64 or 128\n",
          "  attention_backward  reference\n"})
        EXPECT_NE(printed.find(line), std::string::npos) << line << "\nin:\n" << printed;
    // The entry points launch on the default stream (their contracts take none): no graph.
    const std::string refusal = table->graph_refusal();
    EXPECT_NE(refusal.find("gemm (05_gemm_advanced/wgmma_gemm), layernorm "
                           "(06_softmax_norms/layernorm), launch on the default stream"),
              std::string::npos)
        << refusal;
}

// The solutions' table in bf16: a readable solution has no bf16 entry point, so the table
// converts around its fp32 contract and says why.
TEST(ExerciseTables, ALibraryWithoutTheBf16EntryPointIsConvertedAround) {
    if (!TRAINER_TEST_SOLUTION_LIBRARIES)
        GTEST_SKIP() << "this build has no solution variant (COURSE_VARIANTS), so no solution "
                        "kernel libraries";
    configure_exercise_tables(
        {choices("solutions.txt", "layernorm 06_softmax_norms/layernorm\n"), 0, 0});
    ::testing::internal::CaptureStdout();
    const Ops<bf16>* table = exercise_table<bf16>("solutions");
    const std::string printed = ::testing::internal::GetCapturedStdout();
    ASSERT_NE(table, nullptr);
    EXPECT_NE(printed.find("  layernorm           solution: 06_softmax_norms/layernorm | (no "
                           "layernorm_bf16 in this library) an fp32 kernel in a bf16 run: its "
                           "inputs converted to float"),
              std::string::npos)
        << printed;
}

}  // namespace
}  // namespace trainer
