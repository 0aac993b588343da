// Optional entry points: a function that an exercise's fast reference defines beside its contract
// (a LayerNorm of bf16 rows, a GEMM with an epilogue: what module 08's trainer calls where the
// library it loads has one, converting around the contract where not), which no stub asks for.
// The checker declares it weak after its header, so that a file without it still links (its
// address is then null), and its cases skip, naming it, instead of failing the learner:
//
//   #include "layernorm_bf16.h"
//   __attribute__((weak)) decltype(layernorm_bf16) layernorm_bf16;
//   ...
//   TEST_F(LayerNorm, Bf16RowLengths) {
//       COURSE_REQUIRE_BF16();                        // course/view.h
//       COURSE_REQUIRE_ENTRY_POINT(layernorm_bf16);
//       ...
#pragma once

#include <gtest/gtest.h>

#include <string>

// Skips the current test, with the reason recorded for the grader, where the file under test
// does not define `function` (declared weak).
#define COURSE_REQUIRE_ENTRY_POINT(function)                                                    \
    do {                                                                                        \
        if (&function == nullptr) {                                                             \
            const std::string course_reason = #function                                         \
                ": not defined by this file (an optional entry point for module 08's trainer, " \
                "which the fast reference defines)";                                            \
            ::testing::Test::RecordProperty("skip_reason", course_reason);                      \
            GTEST_SKIP() << course_reason;                                                      \
        }                                                                                       \
    } while (0)
