// The op check of module 08's exercise tables (ops_check.cu): a table that runs each op of a
// table under test and the reference's on the same inputs, on the trainer's own shapes, and
// compares their outputs.
#pragma once

#include <string>

#include "ops.h"

namespace trainer {

// The ops of a table (ops.h), in the order of its fields.
enum class TrainerOp {
    kEmbeddingForward,
    kEmbeddingBackward,
    kLayerNormForward,
    kLayerNormBackward,
    kLinearForward,
    kLinearBackward,
    kAttentionForward,
    kAttentionBackward,
    kResidualForward,
    kCrossEntropy,
    kSumOfSquares,
    kAdamW,
    kDecodeEmbedding,
    kKvCacheWrite,
    kDecodeAttention,
    kSample,
    kCount
};
const char* trainer_op_name(TrainerOp op);

// Which exercises an op of the tested table runs now, as the check's messages name them
// ("gemm (yours: 04_sgemm/sgemm_vectorized)"); empty where it runs the reference alone (not
// checked).
using ExercisesIn = std::string (*)(TrainerOp op);

// `tested`, checked: on step 0 and every `every` steps after, up to `steps` (0: no end), the
// run's steps counted from `first_step` (a resumed run's),
// each call of an op that runs an exercise also runs the reference's op on the same inputs (its
// outputs set aside), then the tested op (whose outputs the run keeps, so that the run is the
// tested table's, checked or not), and compares. A difference beyond the tolerance throws, naming
// the op, the exercises in it, the call and its shapes, the output and the elements that differ;
// a tested kernel that crashes is named the same way. After each checked step, one line says how
// close to its tolerance each op came.
template <typename Act>
const Ops<Act>* checked_table(const Ops<Act>& tested, const Ops<Act>& reference,
                              ExercisesIn exercises_in, int every, int steps, int first_step = 0);

}  // namespace trainer
